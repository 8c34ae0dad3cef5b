"""The torch attention backend against plain per-sequence attention, with sliding windows and soft-capping;
backend selection and fallback."""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch

from inference.models.layers.attention import AttentionBackend, BatchLayout, select_backend
from inference.models.layers.attention.torch_backend import TorchAttentionBackend

BLOCK, HEADS, KV_HEADS, DIM = 4, 4, 2, 8


def reference(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Causal attention of the last q.shape[0] positions over all keys (lower-right aligned), GQA; a row at
    position p sees keys (p - window, p] (transformers' sliding window); scores soft-capped by tanh."""
    rep = HEADS // KV_HEADS
    k = keys.repeat_interleave(rep, dim=1)
    v = values.repeat_interleave(rep, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(DIM)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    q_pos = torch.arange(keys.shape[0] - q.shape[0], keys.shape[0])[:, None]
    k_pos = torch.arange(keys.shape[0])[None, :]
    hidden = (k_pos > q_pos) | (k_pos <= q_pos - (window or keys.shape[0] + 1))
    return torch.einsum("hqk,khd->qhd", scores.masked_fill(hidden, float("-inf")).softmax(-1), v)


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    scale: float,
    window_size: tuple[int, int],
    softcap: float,
) -> torch.Tensor:
    """Stand-in flash-attn kernel: bottom-right causal, GQA, as the flash-attn docstrings specify; a row
    sees window_size[0] keys before its own (-1: all), scores capped where softcap > 0."""
    assert abs(scale - DIM**-0.5) < 1e-12
    left, right = window_size
    assert right in (-1, 0)  # causal: nothing to the right
    return reference(q, keys, values, None if left < 0 else left + 1, softcap or None)


def fake_flash_attn(*, window_and_softcap: bool = True) -> types.ModuleType:
    """A CPU flash_attn module with the real call signatures, to test our plumbing (dtypes, layouts); an
    older one without window_size and softcap where asked."""

    def varlen(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max_q,
        max_k,
        *,
        softmax_scale,
        causal,
        block_table=None,
        window_size=(-1, -1),
        softcap=0.0,
    ):
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
            outs.append(attend(qi, ki, vi, softmax_scale, window_size, softcap))
        return torch.cat(outs)

    def with_kvcache(
        q,
        k_cache,
        v_cache,
        *,
        cache_seqlens,
        block_table,
        softmax_scale,
        causal,
        window_size=(-1, -1),
        softcap=0.0,
    ):
        assert causal and q.dim() == 4 and q.shape[1] == 1 and cache_seqlens.dtype == torch.int32
        assert block_table.dtype == torch.int32 and k_cache.shape[1] % 256 == 0
        rows = []
        for b in range(q.shape[0]):
            n = int(cache_seqlens[b])
            ki = k_cache[block_table[b].long()].flatten(0, 1)[:n]
            vi = v_cache[block_table[b].long()].flatten(0, 1)[:n]
            rows.append(attend(q[b], ki, vi, softmax_scale, window_size, softcap))
        return torch.stack(rows)

    def old_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, softmax_scale, causal, block_table=None):
        return varlen(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=softmax_scale, causal=causal)

    def old_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table, softmax_scale, causal):
        return with_kvcache(
            q,
            k_cache,
            v_cache,
            cache_seqlens=cache_seqlens,
            block_table=block_table,
            softmax_scale=softmax_scale,
            causal=causal,
        )

    module = types.ModuleType("flash_attn")
    module.flash_attn_varlen_func = varlen if window_and_softcap else old_varlen  # type: ignore[attr-defined]
    module.flash_attn_with_kvcache = with_kvcache if window_and_softcap else old_with_kvcache  # type: ignore[attr-defined]
    return module


SPANS = [
    [(0, 9)],  # whole prompt
    [(5, 1), (9, 1), (2, 1)],  # decode-only batch, different lengths
    [(6, 5), (0, 7), (12, 1)],  # chunk after cached tokens, fresh prompt, decode
    [(11, 6), (3, 1), (0, 13)],  # past a window of 4 everywhere but the short decode row
]
# (window, softcap): plain; a window shorter than most contexts; a cap that bends these scores; both.
FEATURES = [(None, None), (4, None), (None, 0.7), (3, 1.2)]


@pytest.mark.parametrize("spans", SPANS)
@pytest.mark.parametrize(("window", "softcap"), FEATURES)
@pytest.mark.parametrize(("backend_name", "block"), [("torch", 4), ("flash", 4), ("flash", 256)])
def test_backend_matches_reference(
    monkeypatch: pytest.MonkeyPatch,
    spans: list[tuple[int, int]],
    window: int | None,
    softcap: float | None,
    backend_name: str,
    block: int,
) -> None:
    backend: AttentionBackend = TorchAttentionBackend()
    if backend_name == "flash":
        monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn())
        from inference.models.layers.attention.flash_backend import FlashAttentionBackend

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
        window=window,
        softcap=softcap,
    )
    expected = [reference(q, k, v, window, softcap) for q, k, v in zip(qs, full_k, full_v, strict=True)]
    torch.testing.assert_close(out, torch.cat(expected), atol=1e-5, rtol=1e-5)


def test_layers_with_different_windows_share_one_step_metadata() -> None:
    """Gemma's local and global layers alternate over one metadata: each gets its own mask."""
    backend = TorchAttentionBackend()
    gen = torch.Generator().manual_seed(3)
    k_cache = torch.zeros(8, BLOCK, KV_HEADS, DIM)
    v_cache = torch.zeros_like(k_cache)
    keys, values = torch.randn(2, 14, KV_HEADS, DIM, generator=gen)
    k_cache.view(-1, KV_HEADS, DIM)[:10], v_cache.view(-1, KV_HEADS, DIM)[:10] = keys[:10], values[:10]
    layout = BatchLayout(
        query_lens=[4, 1],
        context_lens=[14, 6],
        block_tables=[[0, 1, 2, 3], [4, 5]],
        slot_mapping=torch.tensor([10, 11, 12, 13, 21]),
        block_size=BLOCK,
        device=torch.device("cpu"),
    )
    meta = backend.build_metadata(layout)
    q = torch.randn(5, HEADS, DIM, generator=gen)
    k_new = torch.cat([keys[10:], torch.randn(1, KV_HEADS, DIM, generator=gen)])
    v_new = torch.cat([values[10:], torch.randn(1, KV_HEADS, DIM, generator=gen)])
    for window in (3, None, 5, 3):
        out = backend.forward(q, k_new, v_new, k_cache, v_cache, meta, DIM**-0.5, window=window)
        k2, v2 = k_cache[4:6].flatten(0, 1)[:6], v_cache[4:6].flatten(0, 1)[:6]
        torch.testing.assert_close(out[:4], reference(q[:4], keys, values, window), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[4:], reference(q[4:], k2, v2, window), atol=1e-5, rtol=1e-5)


def test_auto_passes_over_a_flash_attn_without_window_or_softcap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", fake_flash_attn(window_and_softcap=False))

    def select(name: str, block_size: int, *, sliding_window: bool = False, softcap: bool = False) -> str:
        cuda, bf16 = torch.device("cuda"), torch.bfloat16
        return select_backend(
            name,
            device=cuda,
            dtype=bf16,
            block_size=block_size,
            num_kv_heads=2,
            head_dim=64,
            sliding_window=sliding_window,
            softcap=softcap,
        ).name

    assert select("auto", 256) == "flash_attn"
    assert select("auto", 256, sliding_window=True) == "triton"
    assert select("auto", 256, softcap=True) == "triton"
    with pytest.raises(ValueError, match="no window_size or softcap"):
        select("flash_attn", 16, sliding_window=True, softcap=True)
    # A forward that asks anyway fails rather than attending over every key.
    from inference.models.layers.attention.flash_backend import FlashAttentionBackend

    backend = FlashAttentionBackend(256)
    with pytest.raises(ValueError, match="window_size"):
        backend._options(4, None)
    with pytest.raises(ValueError, match="softcap"):
        backend._options(None, 30.0)


def test_missing_flash_attn_fails_loud_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # makes `import flash_attn` raise ImportError
    cuda = torch.device("cuda")
    with pytest.raises(ValueError, match="flash-attn is unusable"):
        select_backend(
            "flash_attn", device=cuda, dtype=torch.bfloat16, block_size=16, num_kv_heads=2, head_dim=64
        )
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        select_backend(
            "flash_attn", device=cuda, dtype=torch.float32, block_size=16, num_kv_heads=2, head_dim=64
        )
    torch_backend = select_backend(
        "torch", device=cuda, dtype=torch.bfloat16, block_size=16, num_kv_heads=2, head_dim=64
    )
    assert torch_backend.name == "torch"
