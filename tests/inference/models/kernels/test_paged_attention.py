"""The AVX2 library's attention op (csrc/avx2/paged_attention.cpp): correct against float64 attention, and
each row's bits the same however its prompt is cut, whatever else the call holds and whichever thread count
runs it (issue 45: SDPA's fp32 rows were not)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from inference.models.kernels import build as kernel_build
from inference.models.quantization.gguf.avx2 import load_avx2_kernel

pytestmark = pytest.mark.skipif(not kernel_build.avx2_supported(), reason="the AVX2 kernels need AVX2")

Chunk = tuple[int, int, int]  # first row in q, rows, context length after the chunk


@pytest.fixture(scope="module", autouse=True)
def avx2_library(test_cache_dir: Path) -> None:
    assert load_avx2_kernel(test_cache_dir) is not None  # registers the library's ops in this process


class Cache:
    """A random paged KV cache (fp32, bf16 or fp16) and one shuffled block table per sequence."""

    def __init__(
        self,
        *,
        heads: int = 9,
        kv_heads: int = 3,
        head_dim: int = 64,
        block_size: int = 16,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        gen = torch.Generator().manual_seed(0)
        self.heads, self.kv_heads, self.head_dim, self.block_size = heads, kv_heads, head_dim, block_size
        shape = (96, block_size, kv_heads, head_dim)
        self.k = torch.randn(shape, generator=gen).to(dtype)
        self.v = torch.randn(shape, generator=gen).to(dtype)
        self.order = torch.randperm(96, generator=gen).int()
        self.gen = gen

    def table(self, sequence: int) -> torch.Tensor:
        return self.order.roll(17 * sequence)[:48]

    def queries(self, rows: int) -> torch.Tensor:
        return torch.randn(rows, self.heads, self.head_dim, generator=self.gen)

    def attend(
        self,
        q: torch.Tensor,
        chunks: list[Chunk],
        sequences: list[int],
        window: int = 0,
        softcap: float = 0.0,
    ) -> torch.Tensor:
        tables = torch.stack([self.table(s) for s in sequences]).contiguous()
        spans = torch.tensor(chunks, dtype=torch.int64)
        op = torch.ops.mooncake_avx2.paged_attention
        return op(q.contiguous(), self.k, self.v, tables, spans, 0.125, window, softcap)

    def reference(
        self, q: torch.Tensor, start: int, sequence: int, window: int = 0, softcap: float = 0.0
    ) -> torch.Tensor:
        """float64 attention of rows at positions start.. over the sequence's keys (transformers' rules)."""
        rows, context = q.shape[0], start + q.shape[0]
        slots = (
            self.table(sequence).long()[:, None] * self.block_size + torch.arange(self.block_size)
        ).flatten()
        group = self.heads // self.kv_heads
        k = self.k.flatten(0, 1)[slots[:context]].double().repeat_interleave(group, 1)
        v = self.v.flatten(0, 1)[slots[:context]].double().repeat_interleave(group, 1)
        scores = torch.einsum("thd,khd->htk", q.double(), k) * 0.125
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        offset = (start + torch.arange(rows))[:, None] - torch.arange(context)[None, :]
        visible = (offset >= 0) & (offset < window if window else True)
        return torch.einsum("htk,khd->thd", scores.masked_fill(~visible, float("-inf")).softmax(-1), v)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim", "block_size"), [(9, 3, 64, 16), (4, 4, 128, 8), (8, 2, 8, 32)]
)
@pytest.mark.parametrize(("start", "rows"), [(0, 1), (0, 40), (300, 25), (113, 1)])
def test_rows_match_float64_attention(
    heads: int, kv_heads: int, head_dim: int, block_size: int, start: int, rows: int
) -> None:
    cache = Cache(heads=heads, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
    q = cache.queries(rows)
    out = cache.attend(q, [(0, rows, start + rows)], [0])
    # fp32 sums over up to 325 keys: a wrong mask, head or scale would be off by ~0.1-1.
    torch.testing.assert_close(out.double(), cache.reference(q, start, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("window", "softcap"), [(37, 0.0), (0, 2.0), (16, 5.0)])
def test_windows_and_soft_caps_follow_transformers(window: int, softcap: float) -> None:
    cache = Cache()
    q = cache.queries(30) * 4
    out = cache.attend(q, [(0, 30, 200)], [0], window=window, softcap=softcap)
    torch.testing.assert_close(
        out.double(), cache.reference(q, 170, 0, window, softcap), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_narrower_cache_is_read_as_its_values(dtype: torch.dtype) -> None:
    cache = Cache(dtype=dtype)
    q = cache.queries(20)
    out = cache.attend(q, [(0, 20, 120)], [0])
    torch.testing.assert_close(out.double(), cache.reference(q, 100, 0), rtol=1e-5, atol=1e-5)


def test_peaked_rows_stay_exact_and_leave_the_callers_float_mode_alone() -> None:
    """Scores 30x the usual spread: most probabilities fall below fp32's normal range and count as zero."""
    cache = Cache()
    q = cache.queries(200) * 30
    out = cache.attend(q, [(0, 200, 200)], [0])
    # Scores up to ~100 carry fp32 rounding of ~1e-5 into the exponentials: within 1e-4, not 1e-5.
    torch.testing.assert_close(out.double(), cache.reference(q, 0, 0), rtol=1e-4, atol=1e-4)
    assert torch.tensor([1e-40]).item() != 0  # subnormals still kept in this thread


def test_a_row_gets_the_same_bits_whatever_its_chunk_company_or_threads() -> None:
    """What one answer however requests arrive needs: a prompt cut anywhere (a prefix-cache hit, a token
    budget's split, a one-token last chunk taken as a decoding row) and rows beside other sequences' rows in
    any order or number, on one thread or two."""
    cache = Cache()
    q = cache.queries(400)
    whole = cache.attend(q, [(0, 400, 400)], [0])
    cuts = [0, 1, 7, 16, 100, 101, 333, 399, 400]
    pieces = list(itertools.pairwise(cuts))
    assert torch.equal(cache.attend(q, [(a, b - a, b) for a, b in pieces], [0] * len(pieces)), whole)
    assert torch.equal(torch.cat([cache.attend(q[a:b], [(0, b - a, b)], [0]) for a, b in pieces]), whole)
    others = cache.queries(60)
    mixed = torch.cat([others[:30], q[380:], others[30:]])
    company = cache.attend(mixed, [(0, 30, 250), (30, 20, 400), (50, 30, 31)], [3, 0, 5])
    assert torch.equal(company[30:50], whole[380:])
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            decoding = cache.attend(
                torch.cat([others[:5], q[399:]]),
                [(i, 1, 300 + i) for i in range(5)] + [(5, 1, 400)],
                [1, 2, 3, 4, 5, 0],
            )
            assert torch.equal(decoding[5], whole[399])
    finally:
        torch.set_num_threads(threads)


def test_inputs_outside_the_cache_or_of_the_wrong_kind_are_refused() -> None:
    cache = Cache()
    q = cache.queries(4)
    with pytest.raises(RuntimeError, match="longer than its table"):
        cache.attend(q, [(0, 4, 48 * 16 + 1)], [0])
    with pytest.raises(RuntimeError, match="chunk outside q"):
        cache.attend(q, [(2, 4, 10)], [0])
    with pytest.raises(RuntimeError, match="fp32"):
        cache.attend(q.bfloat16(), [(0, 4, 10)], [0])
    tables = torch.full((1, 4), 96, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="out of the cache"):
        torch.ops.mooncake_avx2.paged_attention(
            q, cache.k, cache.v, tables, torch.tensor([[0, 4, 10]]), 0.125
        )
