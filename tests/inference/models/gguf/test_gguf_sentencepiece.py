"""Gemma and Phi-3 GGUFs carry SentencePiece vocabularies (`tokenizer.ggml.model` "llama": pieces, scores and
token types, as llama.cpp's converter copies them out of the model's tokenizer.model). A GGUF loaded here
encodes and decodes as SentencePiece itself does with that model: byte fallback, digits split one by one,
whitespace kept, and the leading "▁" that Llama-style vocabularies (Phi-3) add and Gemma's does not.

The reference is a real SentencePiece BPE model trained in the test on sentences made of the bundled
tokenizer's words, with each family's normalizer settings."""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sentencepiece as spm
from gguf import GGUFWriter

from inference.models.loader.load import load_model
from tests.inference.gguf_files import tokenizer_metadata, write_dense_gguf

VOCAB = 512  # the tiny checkpoints' vocabulary
# Token types as llama.cpp's converter writes them (gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces, and  two inside",
    "digits 2026 and 3.14159",
    "new\nlines\n\nand\ttabs",
    "Ünïcödé: naïve café, 東京, emoji 🎉 ✓",
    "end with a space ",
]
# Per family, SentencePiece's normalizer as the real models' tokenizer.model sets it.
FAMILIES = {
    "gemma2": {"add_dummy_prefix": False},  # Gemma: no "▁" before the first word
    "phi3": {"add_dummy_prefix": True},  # Llama 2's tokenizer, which Phi-3 keeps
}


def corpus(seed: int = 0) -> Iterator[str]:
    """Sentences of the bundled tokenizer's plain words: enough distinct merges for a 512-piece BPE."""
    words = sorted(
        {
            token[1:].lower()
            for token in tokenizer_metadata(8192)["tokens"]
            if token.startswith("Ġ") and re.fullmatch(r"[A-Za-z]{2,12}", token[1:])
        }
    )
    rng = random.Random(seed)
    for _ in range(4000):
        yield " ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) + rng.choice(
            [".", "!", "?", ","]
        )


def train(add_dummy_prefix: bool) -> Any:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=corpus(),
        model_writer=model,
        model_type="bpe",
        vocab_size=VOCAB,
        byte_fallback=True,
        split_digits=True,
        add_dummy_prefix=add_dummy_prefix,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def sentencepiece_vocabulary(processor: Any) -> Callable[[GGUFWriter, int], None]:
    """Writes `processor`'s vocabulary into a GGUF as llama.cpp's converter does for a tokenizer.model."""

    def write(writer: GGUFWriter, vocab: int) -> None:
        assert processor.get_piece_size() == vocab
        kinds = []
        for i in range(vocab):
            if processor.is_unknown(i):
                kinds.append(UNKNOWN)
            elif processor.is_control(i):
                kinds.append(CONTROL)
            elif processor.is_byte(i):
                kinds.append(BYTE)
            elif processor.is_unused(i):
                kinds.append(UNUSED)
            else:
                kinds.append(NORMAL)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list([processor.id_to_piece(i) for i in range(vocab)])
        writer.add_token_scores([processor.get_score(i) for i in range(vocab)])
        writer.add_token_types(kinds)
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)

    return write


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(
    request: pytest.FixtureRequest,
    tiny_model_dir: Callable[[str], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Any, Any]:
    arch = str(request.param)
    processor = train(**FAMILIES[arch])
    folder = tmp_path_factory.mktemp(f"{arch}-spm")
    checkpoint = tiny_model_dir({"gemma2": "gemma2", "phi3": "phi3-longrope"}[arch])
    path = folder / f"{arch}.gguf"
    write_dense_gguf(checkpoint, path, arch, tokenizer=sentencepiece_vocabulary(processor))
    loaded = load_model(str(path), dtype="float32", device="cpu")
    return processor, loaded.tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_a_sentencepiece_gguf_encodes_as_sentencepiece_does(family: tuple[Any, Any], text: str) -> None:
    processor, tokenizer = family
    expected = [processor.bos_id(), *processor.encode(text)]
    assert tokenizer.encode(text) == expected, [processor.id_to_piece(i) for i in expected]
    # byte fallback really happened where the vocabulary lacks a character
    if any(ord(c) > 0x2000 for c in text):
        assert any(processor.is_byte(i) for i in expected)


@pytest.mark.parametrize("text", TEXTS)
def test_a_sentencepiece_gguf_decodes_as_sentencepiece_does(family: tuple[Any, Any], text: str) -> None:
    processor, tokenizer = family
    ids = processor.encode(text)
    assert tokenizer.decode(ids, skip_special_tokens=True) == processor.decode(ids) == text
