"""The incremental detokenizer against the real byte-level BPE tokenizer of the default model."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from inference.core.detokenizer import IncrementalDetokenizer

pytestmark = pytest.mark.slow

TEXTS = ["月が綺麗ですね 🌙🚀 and 👩‍👩‍👧 family", "naïve café — 東京タワー ✨✨", " leading space\n\ttabs"]


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    return AutoTokenizer.from_pretrained(default_model_dir)


@pytest.mark.parametrize("text", TEXTS)
def test_one_token_at_a_time_reassembles_the_text_without_replacement_chars(tokenizer, text):
    ids = tokenizer.encode(text)
    assert len(ids) > len(text.split())  # multibyte characters really are split over tokens
    prompt = tokenizer.encode("Say:")
    detok = IncrementalDetokenizer(tokenizer, prompt, skip_special_tokens=True, stop=[])
    deltas = []
    for token_id in ids:
        assert detok.add_token(token_id) is None
        deltas.append(detok.take_delta(finished=False))
    deltas.append(detok.take_delta(finished=True))
    assert "".join(deltas) == text == tokenizer.decode(ids)
    assert all("\ufffd" not in d for d in deltas)


def test_stop_string_inside_multibyte_text(tokenizer):
    text = "月が綺麗ですね 🌙 end"
    detok = IncrementalDetokenizer(tokenizer, [], skip_special_tokens=True, stop=["🌙"])
    deltas, matched = [], None
    for token_id in tokenizer.encode(text):
        matched = detok.add_token(token_id)
        deltas.append(detok.take_delta(finished=matched is not None))
        if matched:
            break
    assert matched == "🌙" and "".join(deltas) == "月が綺麗ですね "


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_fast_decode_path_equals_transformers_decode(tokenizer, skip_special_tokens):
    """The real tokenizer takes the direct Rust decode, and it gives transformers' decode() text."""
    from inference.core.detokenizer import _decoder

    fast = _decoder(tokenizer, skip_special_tokens)
    assert fast.__name__ == "fast"
    chat = tokenizer.apply_chat_template([{"role": "user", "content": TEXTS[0]}], tokenize=False)
    ids = tokenizer.encode(chat + TEXTS[1] + TEXTS[2])
    assert tokenizer.all_special_ids and set(ids) & set(tokenizer.all_special_ids)
    for end in range(1, len(ids) + 1):
        window = ids[max(0, end - 7) : end]
        expected = tokenizer.decode(
            window, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False
        )
        assert fast(window) == expected
