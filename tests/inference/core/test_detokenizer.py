from inference.core.detokenizer import IncrementalDetokenizer
from tests.inference.fakes import ByteTokenizer


def stream(text_or_ids, stop=(), prompt=(104, 105)):
    tok = ByteTokenizer()
    ids = tok.encode(text_or_ids) if isinstance(text_or_ids, str) else text_or_ids
    detok = IncrementalDetokenizer(tok, list(prompt), skip_special_tokens=True, stop=list(stop))
    deltas, matched = [], None
    for t in ids:
        matched = detok.add_token(t)
        deltas.append(detok.take_delta(finished=matched is not None))
        if matched:
            break
    deltas.append(detok.take_delta(finished=True))
    return deltas, matched, detok


def test_multibyte_characters_split_over_tokens_never_show_replacement_chars():
    text = "héllo 世界 🌙🚀 done"
    deltas, _, detok = stream(text)
    assert "".join(deltas) == text == detok.emitted_text
    assert all("\ufffd" not in d for d in deltas)


def test_stop_string_is_never_emitted_even_in_part():
    deltas, matched, detok = stream("abc STOP def", stop=["STOP"])
    assert matched == "STOP" and "".join(deltas) == "abc " and detok.text == "abc "
    assert not any("S" in d for d in deltas)


def test_a_false_start_of_a_stop_string_is_released():
    deltas, matched, _ = stream("a ST b", stop=["STOP"])
    assert matched is None and "".join(deltas) == "a ST b"


def test_stop_string_spanning_multibyte_text():
    deltas, matched, _ = stream("日本語です。終わり", stop=["。"])
    assert matched == "。" and "".join(deltas) == "日本語です"
