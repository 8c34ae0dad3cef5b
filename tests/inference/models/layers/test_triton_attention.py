"""Triton paged decode and KV store against plain attention; the Triton backend against the torch one.

Without a GPU these run in Triton's CPU interpreter (tests/inference/conftest.py), which emulates fp32
and fp16 dots but not bf16 ones; bench/gpu_check.sh checks bf16 on CUDA.
"""

from __future__ import annotations

import sys

import pytest
import torch

from inference.models.layers.attention import BatchLayout, select_backend
from inference.models.layers.attention.base import sequence_lengths
from inference.models.layers.attention.torch_backend import TorchAttentionBackend
from inference.models.layers.attention.triton_backend import TritonAttentionBackend
from inference.models.layers.attention.triton_decode import (
    num_splits,
    paged_decode,
    store_kv,
    supports_head_dim,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def reference_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: list[list[int]],
    lens: list[int],
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """float64 softmax attention of each row's query over its first lens[b] cached positions (GQA), only the
    last `window` of them where given, scores soft-capped by tanh where given."""
    rows = []
    block = k_cache.shape[1]
    for b, n in enumerate(lens):
        blocks = tables[b][: -(-n // block)]
        first = max(0, n - window) if window else 0
        k = k_cache[blocks].flatten(0, 1)[first:n].double()
        v = v_cache[blocks].flatten(0, 1)[first:n].double()
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = torch.einsum("hd,nhd->hn", q[b].double(), k) * q.shape[-1] ** -0.5
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        rows.append(torch.einsum("hn,nhd->hd", scores.softmax(-1), v))
    return torch.stack(rows)


def random_cache(
    num_blocks: int, block: int, kv_heads: int, dim: int, dtype: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(num_blocks, block, kv_heads, dim, generator=gen).to(DEVICE, dtype)
    v = torch.randn(num_blocks, block, kv_heads, dim, generator=gen).to(DEVICE, dtype)
    return k, v, torch.randperm(num_blocks, generator=gen).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(4, 2, 16), (8, 8, 32), (9, 3, 64)])
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_paged_decode_matches_reference(
    dtype: torch.dtype, heads: int, kv_heads: int, dim: int, splits: int
) -> None:
    block = 16
    k_cache, v_cache, perm = random_cache(40, block, kv_heads, dim, dtype, seed=heads * dim + splits)
    # One position; a block boundary plus one; several tiles over scattered blocks; a tile boundary.
    lens = [1, 17, 200, 128]
    tables, start = [], 0
    for n in lens:
        tables.append(perm[start : start + -(-n // block)])
        start += len(tables[-1])
    width = max(len(t) for t in tables) + 2  # wider than needed, as captured graphs' tables are
    table = torch.zeros(len(lens), width, dtype=torch.int32)
    for row, blocks in enumerate(tables):
        table[row, : len(blocks)] = torch.tensor(blocks)
    q = torch.randn(len(lens), heads, dim, generator=torch.Generator().manual_seed(1)).to(DEVICE, dtype)
    lengths = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    out = paged_decode(q, k_cache, v_cache, table.to(DEVICE), lengths, dim**-0.5, splits)
    expected = reference_decode(q.cpu(), k_cache.cpu(), v_cache.cpu(), tables, lens)
    error = (out.cpu().double() - expected).norm() / expected.norm()
    assert error < (1e-6 if dtype == torch.float32 else 2e-3), f"relative error {error:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize(("window", "softcap"), [(50, None), (64, None), (1, None), (None, 0.8), (30, 1.5)])
def test_paged_decode_window_and_softcap(
    dtype: torch.dtype, splits: int, window: int | None, softcap: float | None
) -> None:
    block, heads, kv_heads, dim = 16, 4, 2, 32
    k_cache, v_cache, perm = random_cache(40, block, kv_heads, dim, dtype, seed=splits + (window or 0))
    # Shorter than the window; a window's start inside a tile and inside a block; on a tile boundary.
    lens = [1, 17, 200, 128, 115]
    tables, start = [], 0
    for n in lens:
        tables.append(perm[start : start + -(-n // block)])
        start += len(tables[-1])
    table = torch.zeros(len(lens), max(len(t) for t in tables), dtype=torch.int32)
    for row, blocks in enumerate(tables):
        table[row, : len(blocks)] = torch.tensor(blocks)
    # Scores a few times the cap, so the cap bends them.
    q = (4 * torch.randn(len(lens), heads, dim, generator=torch.Generator().manual_seed(2))).to(DEVICE, dtype)
    lengths = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    out = paged_decode(
        q, k_cache, v_cache, table.to(DEVICE), lengths, dim**-0.5, splits, window=window, softcap=softcap
    )
    expected = reference_decode(q.cpu(), k_cache.cpu(), v_cache.cpu(), tables, lens, window, softcap)
    error = (out.cpu().double() - expected).norm() / expected.norm()
    assert error < (1e-6 if dtype == torch.float32 else 2e-3), f"relative error {error:.2e}"


def test_paged_decode_reads_a_strided_query() -> None:
    """Decode rows straight out of the fused rotary output: heads contiguous, rows strided."""
    k_cache, v_cache, perm = random_cache(8, 16, 2, 16, torch.float32, seed=3)
    fused = torch.randn(3, 4 + 2, 16, device=DEVICE)  # [tokens, q heads + k heads, dim]
    q = fused[:, :4]
    table = torch.tensor([perm[:2], perm[2:4], perm[4:6]], dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([20, 5, 32], dtype=torch.int32, device=DEVICE)
    out = paged_decode(q, k_cache, v_cache, table, lens, 0.25, 2)
    expected = paged_decode(q.contiguous(), k_cache, v_cache, table, lens, 0.25, 2)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_store_kv_writes_real_slots_and_skips_padding() -> None:
    kv_heads, dim = 2, 16
    k_cache = torch.zeros(4, 4, kv_heads, dim, device=DEVICE)
    v_cache = torch.zeros_like(k_cache)
    # Keys as the fused QKV output leaves them: a strided view with each token's heads back to back.
    fused = torch.randn(5, 3 * kv_heads, dim, device=DEVICE)
    k, v = fused[:, kv_heads : 2 * kv_heads], fused[:, 2 * kv_heads :]
    slots = torch.tensor([3, -1, 7, 0, 15], device=DEVICE)
    store_kv(k, v, k_cache, v_cache, slots)
    flat_k, flat_v = k_cache.view(-1, kv_heads, dim), v_cache.view(-1, kv_heads, dim)
    for token, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(flat_k[slot], k[token]) and torch.equal(flat_v[slot], v[token])
    written = flat_k.abs().sum(dim=(1, 2)).nonzero().flatten().tolist()
    assert written == [0, 3, 7, 15]  # the padding row (-1) wrote nowhere


def test_splits_fill_the_device_but_never_exceed_the_context() -> None:
    cpu = torch.device("cpu")  # the interpreter's stand-in has 4 multiprocessors
    assert num_splits(1, 2, cpu) == 4
    assert num_splits(1, 2, cpu, max_context=65) == 2
    assert num_splits(64, 8, cpu) == 1
    assert supports_head_dim(64) and supports_head_dim(128)
    assert not supports_head_dim(96) and not supports_head_dim(8)


SPANS = [
    [(0, 9)],  # whole prompt
    [(5, 1), (40, 1), (2, 1)],  # decode-only batch, different lengths
    [(6, 5), (0, 7), (12, 1), (70, 1)],  # chunk after cached tokens, fresh prompt, decode rows
]


@pytest.mark.parametrize("spans", SPANS)
@pytest.mark.parametrize(("window", "softcap"), [(None, None), (5, None), (None, 0.6), (7, 2.0)])
def test_triton_backend_matches_torch_backend(
    spans: list[tuple[int, int]], window: int | None, softcap: float | None
) -> None:
    block, heads, kv_heads, dim, num_blocks = 4, 4, 2, 16, 96
    gen = torch.Generator().manual_seed(len(spans))
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables = [perm[i * 20 : i * 20 + 20] for i in range(len(spans))]
    caches = {
        name: (torch.zeros(num_blocks, block, kv_heads, dim), torch.zeros(num_blocks, block, kv_heads, dim))
        for name in ("torch", "triton")
    }
    full_k = [torch.randn(s + n, kv_heads, dim, generator=gen) for s, n in spans]
    full_v = [torch.randn(s + n, kv_heads, dim, generator=gen) for s, n in spans]
    slots = [
        [t[p // block] * block + p % block for p in range(len(k))]
        for t, k in zip(tables, full_k, strict=True)
    ]
    for k_cache, v_cache in caches.values():
        for (start, _), sl, k, v in zip(spans, slots, full_k, full_v, strict=True):
            k_cache.view(-1, kv_heads, dim)[sl[:start]] = k[:start]
            v_cache.view(-1, kv_heads, dim)[sl[:start]] = v[:start]
    layout = BatchLayout(
        query_lens=[n for _, n in spans],
        context_lens=[s + n for s, n in spans],
        block_tables=tables,
        slot_mapping=torch.tensor([x for (s, _), sl in zip(spans, slots, strict=True) for x in sl[s:]]),
        block_size=block,
        device=torch.device("cpu"),
    )
    q = torch.randn(sum(n for _, n in spans), heads, dim, generator=gen)
    k = torch.cat([k[s:] for (s, _), k in zip(spans, full_k, strict=True)])
    v = torch.cat([v[s:] for (s, _), v in zip(spans, full_v, strict=True)])
    outs = {}
    for name, backend in (("torch", TorchAttentionBackend()), ("triton", TritonAttentionBackend(kv_heads))):
        k_cache, v_cache = caches[name]
        meta = backend.build_metadata(layout)
        outs[name] = backend.forward(
            q, k, v, k_cache, v_cache, meta, dim**-0.5, window=window, softcap=softcap
        )
    torch.testing.assert_close(outs["triton"], outs["torch"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches["triton"][0], caches["torch"][0], atol=0, rtol=0)
    torch.testing.assert_close(caches["triton"][1], caches["torch"][1], atol=0, rtol=0)


def select(
    name: str, device: str, head_dim: int = 64, dtype: torch.dtype = torch.bfloat16, block_size: int = 16
) -> str:
    backend = select_backend(
        name,
        device=torch.device(device),
        dtype=dtype,
        block_size=block_size,
        num_kv_heads=2,
        head_dim=head_dim,
    )
    return backend.name


def test_auto_takes_flash_attn_only_where_it_reads_the_cache_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.inference.models.layers.test_attention import fake_flash_attn

    monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn())
    assert select("auto", "cuda", block_size=256) == "flash_attn"
    assert select("auto", "cuda", block_size=16) == "triton"  # flash would gather every context per step
    assert select("flash_attn", "cuda", block_size=16) == "flash_attn"  # asked for: given
    assert select("auto", "cuda", block_size=256, dtype=torch.float32) == "triton"


def test_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # makes `import flash_attn` raise ImportError
    assert select("auto", "cpu") == "torch"
    assert select("auto", "cuda") == "triton"  # flash-attn absent: Triton next
    assert select("auto", "cuda", dtype=torch.float32) == "triton"
    assert select("auto", "cuda", head_dim=96) == "torch"  # a head size the kernel cannot tile
    with pytest.raises(ValueError, match="head_dim 96"):
        select("triton", "cuda", head_dim=96)
    assert select("triton", "cpu") == "triton"  # the interpreter is on in tests
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        select("triton", "cpu")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert select("auto", "cuda") == "torch"
    with pytest.raises(ValueError, match="Triton is not installed"):
        select("triton", "cuda")


def test_sequence_lengths_per_token_for_longrope() -> None:
    """Each token's sequence length after the step: from the step's lengths where the metadata has them, else
    (a CUDA graph's decode-only metadata) each token's own position + 1."""
    backend = TritonAttentionBackend(2)
    layout = BatchLayout(
        query_lens=[3, 1, 2],
        context_lens=[3, 9, 12],
        block_tables=[[0], [1, 2, 3], [4, 5, 6]],
        slot_mapping=torch.tensor([0, 1, 2, 12, 26, 27]),
        block_size=4,
        device=torch.device("cpu"),
    )
    positions = torch.tensor([0, 1, 2, 8, 10, 11])
    assert sequence_lengths(backend.build_metadata(layout), positions).tolist() == [3, 3, 3, 9, 12, 12]
    graph = backend.graph_metadata(
        torch.tensor([5, 40]), torch.zeros(2, 4, dtype=torch.int32), torch.tensor([6, 41], dtype=torch.int32)
    )
    assert sequence_lengths(graph, torch.tensor([5, 40])).tolist() == [6, 41]
