"""bench/perplexity.py's pure parts: llama-perplexity's windows and scored tokens, the perplexity and its
error as llama.cpp prints them, the logits file's token header, and the table."""

from __future__ import annotations

import argparse
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from bench.perplexity import render, score
from bench.perplexity_files import _logits_file_tokens
from bench.perplexity_windows import scored_positions, summarize, window_nlls, windows


def test_windows_do_not_overlap_and_drop_the_tail() -> None:
    assert windows(1100, 512) == [(0, 512), (512, 1024)]
    assert windows(2048, 512)[-1] == (1536, 2048)


@pytest.mark.parametrize(("tokens", "ctx"), [(1023, 512), (100, 7), (100, 2)])
def test_windows_refuse_what_llama_perplexity_refuses(tokens: int, ctx: int) -> None:
    with pytest.raises(ValueError):
        windows(tokens, ctx)


def test_the_second_half_is_scored_as_llama_cpp_counts_it() -> None:
    # perplexity.cpp: first = n_ctx/2, n_ctx - 1 - first tokens per window, tokens first+1 .. n_ctx-1.
    for ctx in (8, 512):
        positions = scored_positions(ctx)
        assert len(positions) == ctx - 1 - ctx // 2
        assert (positions[0], positions[-1]) == (ctx // 2 + 1, ctx - 1)
    assert window_nlls([-0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0], 8) == [5.0, 6.0, 7.0]
    with pytest.raises(ValueError):
        window_nlls([0.0] * 7, 8)


def test_summarize_matches_llama_perplexity_formula() -> None:
    flat = summarize([2.0] * 10)
    assert flat.ppl == pytest.approx(math.exp(2.0)) and flat.error == 0.0 and flat.count == 10
    nlls = [1.0, 2.0, 3.0, 4.0]
    mean, mean_sq = 2.5, (1 + 4 + 9 + 16) / 4
    expected_err = math.exp(mean) * math.sqrt((mean_sq - mean * mean) / 3)
    got = summarize(nlls)
    assert got.ppl == pytest.approx(math.exp(mean)) and got.error == pytest.approx(expected_err)


def test_score_reads_only_the_scored_half_of_every_window() -> None:
    # Window logprobs -1 in the unscored half and -2 in the scored one: ppl is exp(2), whatever the rest.
    ctx = 8
    window = [0.0] + [-1.0] * (ctx // 2) + [-2.0] * (ctx - 1 - ctx // 2)
    assert score([window, window], ctx).ppl == pytest.approx(math.exp(2.0))
    assert score([window, window], ctx).count == 2 * 3


def test_logits_file_tokens_reads_the_header(tmp_path: Path) -> None:
    path = tmp_path / "logits.bin"
    tokens = np.arange(2 * 4, dtype="<i4")
    path.write_bytes(b"_logits_" + struct.pack("<iii", 4, 50, 2) + tokens.tobytes() + b"\0" * 64)
    assert _logits_file_tokens(path) == list(range(8))
    path.write_bytes(b"notlogit" + b"\0" * 64)
    with pytest.raises(ValueError):
        _logits_file_tokens(path)


def test_table_marks_whether_ours_is_no_further_than_llama_cpp() -> None:
    row = {"type": "Q4_1", "ref": 20.0, "ref_err": 1.0, "llama": 20.5, "default": 20.1, "avx2": 21.0}
    row["paths"] = {"default": "bfloat16, dense (1 s)", "avx2": "float32, avx2 blocks (2 s)"}
    args = argparse.Namespace(ctx=512, threads=2)
    table = render([row], ["default", "avx2"], args)
    assert (
        "| Q4_1 | 20.0000 ± 1.000 | 20.5000 | 20.1000 | 21.0000 | 0.1000 vs 0.5000 ✓ | 1.0000 vs 0.5000 ✗ |"
        in table
    )
    assert "- Q4_1 avx2: float32, avx2 blocks (2 s)" in table
