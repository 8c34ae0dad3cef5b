"""The torch attention backend against plain per-sequence attention; backend selection and fallback."""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch

from inference.models.attention import AttentionBackend, BatchLayout, select_backend
from inference.models.attention.torch_backend import TorchAttentionBackend

BLOCK, HEADS, KV_HEADS, DIM = 4, 4, 2, 8


def reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Causal attention of the last q.shape[0] positions over all keys (lower-right aligned), GQA."""
    rep = HEADS // KV_HEADS
    k = keys.repeat_interleave(rep, dim=1)
    v = values.repeat_interleave(rep, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(DIM)
    q_pos = torch.arange(keys.shape[0] - q.shape[0], keys.shape[0])
    scores = scores.masked_fill(torch.arange(keys.shape[0])[None, :] > q_pos[:, None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """Stand-in flash-attn kernel: bottom-right causal, GQA, as the flash-attn docstrings specify."""
    assert abs(scale - DIM**-0.5) < 1e-12
    return reference(q, keys, values)


def fake_flash_attn() -> types.ModuleType:
    """A CPU flash_attn module with the real call signatures, to test our plumbing (dtypes, layouts)."""

    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, softmax_scale, causal, block_table=None):
        assert causal and cu_q.dtype == cu_k.dtype == torch.int32
        outs = []
        for i in range(len(cu_q) - 1):
            n = int(cu_k[i + 1] - cu_k[i])
            if block_table is None:
                ki, vi = k[cu_k[i] : cu_k[i + 1]], v[cu_k[i] : cu_k[i + 1]]
            else:
                assert block_table.dtype == torch.int32 and k.shape[1] % 256 == 0
                ki = k[block_table[i].long()].flatten(0, 1)[:n]
                vi = v[block_table[i].long()].flatten(0, 1)[:n]
            qi = q[cu_q[i] : cu_q[i + 1]]
            assert len(qi) <= max_q and n <= max_k
            outs.append(attend(qi, ki, vi, softmax_scale))
        return torch.cat(outs)

    def with_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table, softmax_scale, causal):
        assert causal and q.dim() == 4 and q.shape[1] == 1 and cache_seqlens.dtype == torch.int32
        assert block_table.dtype == torch.int32 and k_cache.shape[1] % 256 == 0
        rows = []
        for b in range(q.shape[0]):
            n = int(cache_seqlens[b])
            ki = k_cache[block_table[b].long()].flatten(0, 1)[:n]
            vi = v_cache[block_table[b].long()].flatten(0, 1)[:n]
            rows.append(attend(q[b], ki, vi, softmax_scale))
        return torch.stack(rows)

    module = types.ModuleType("flash_attn")
    module.flash_attn_varlen_func = varlen  # type: ignore[attr-defined]
    module.flash_attn_with_kvcache = with_kvcache  # type: ignore[attr-defined]
    return module


SPANS = [
    [(0, 9)],  # whole prompt
    [(5, 1), (9, 1), (2, 1)],  # decode-only batch, different lengths
    [(6, 5), (0, 7), (12, 1)],  # chunk after cached tokens, fresh prompt, decode
]


@pytest.mark.parametrize("spans", SPANS)
@pytest.mark.parametrize(("backend_name", "block"), [("torch", 4), ("flash", 4), ("flash", 256)])
def test_backend_matches_reference(
    monkeypatch: pytest.MonkeyPatch, spans: list[tuple[int, int]], backend_name: str, block: int
) -> None:
    backend: AttentionBackend = TorchAttentionBackend()
    if backend_name == "flash":
        monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn())
        from inference.models.attention.flash_backend import FlashAttentionBackend

        backend = FlashAttentionBackend(block)
    gen = torch.Generator().manual_seed(0)
    num_blocks = 32
    k_cache = torch.zeros(num_blocks, block, KV_HEADS, DIM)
    v_cache = torch.zeros_like(k_cache)
    full_k = [torch.randn(s + n, KV_HEADS, DIM, generator=gen) for s, n in spans]
    full_v = [torch.randn(s + n, KV_HEADS, DIM, generator=gen) for s, n in spans]
    # Scattered, non-contiguous tables; the cached prefix of each sequence is already in place.
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables = [perm[i * 5 : i * 5 + 5] for i in range(len(spans))]
    slot = [
        [t[p // block] * block + p % block for p in range(len(k))]
        for t, k in zip(tables, full_k, strict=True)
    ]
    for (start, _), slots, k, v in zip(spans, slot, full_k, full_v, strict=True):
        k_cache.view(-1, KV_HEADS, DIM)[slots[:start]] = k[:start]
        v_cache.view(-1, KV_HEADS, DIM)[slots[:start]] = v[:start]
    qs = [torch.randn(n, HEADS, DIM, generator=gen) for _, n in spans]
    layout = BatchLayout(
        query_lens=[n for _, n in spans],
        context_lens=[s + n for s, n in spans],
        block_tables=tables,
        slot_mapping=torch.tensor([x for (s, _), sl in zip(spans, slot, strict=True) for x in sl[s:]]),
        block_size=block,
        device=torch.device("cpu"),
    )
    out = backend.forward(
        torch.cat(qs),
        torch.cat([k[s:] for (s, _), k in zip(spans, full_k, strict=True)]),
        torch.cat([v[s:] for (s, _), v in zip(spans, full_v, strict=True)]),
        k_cache,
        v_cache,
        backend.build_metadata(layout),
        DIM**-0.5,
    )
    expected = torch.cat([reference(q, k, v) for q, k, v in zip(qs, full_k, full_v, strict=True)])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_missing_flash_attn_fails_loud_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # makes `import flash_attn` raise ImportError
    cuda = torch.device("cuda")
    shape = {"block_size": 16, "num_kv_heads": 2, "head_dim": 64}
    with pytest.raises(ValueError, match="flash-attn is unusable"):
        select_backend("flash_attn", device=cuda, dtype=torch.bfloat16, **shape)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        select_backend("flash_attn", device=cuda, dtype=torch.float32, **shape)
    assert select_backend("torch", device=cuda, dtype=torch.bfloat16, **shape).name == "torch"
