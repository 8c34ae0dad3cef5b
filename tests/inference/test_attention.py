"""The torch attention backend against plain per-sequence attention; backend selection and fallback."""

from __future__ import annotations

import math

import pytest
import torch

from inference.attention import BatchLayout, select_backend
from inference.attention.torch_backend import TorchAttentionBackend

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


@pytest.mark.parametrize(
    "spans",
    [
        [(0, 9)],  # whole prompt
        [(5, 1), (9, 1), (2, 1)],  # decode-only batch, different lengths
        [(6, 5), (0, 7), (12, 1)],  # chunk after cached tokens, fresh prompt, decode
    ],
)
def test_torch_backend_matches_reference(spans: list[tuple[int, int]]) -> None:
    gen = torch.Generator().manual_seed(0)
    num_blocks = 32
    k_cache = torch.zeros(num_blocks, BLOCK, KV_HEADS, DIM)
    v_cache = torch.zeros_like(k_cache)
    full_k = [torch.randn(s + n, KV_HEADS, DIM, generator=gen) for s, n in spans]
    full_v = [torch.randn(s + n, KV_HEADS, DIM, generator=gen) for s, n in spans]
    # Scattered, non-contiguous tables; the cached prefix of each sequence is already in place.
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables = [perm[i * 5 : i * 5 + 5] for i in range(len(spans))]
    slot = [
        [t[p // BLOCK] * BLOCK + p % BLOCK for p in range(len(k))]
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
        block_size=BLOCK,
        device=torch.device("cpu"),
    )
    backend = TorchAttentionBackend()
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


def test_selection_on_cpu_is_torch() -> None:
    backend = select_backend("auto", device=torch.device("cpu"), dtype=torch.float32, block_size=16)
    assert backend.name == "torch"


def test_missing_flash_attn_falls_back_on_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "flash_attn", None)  # makes `import flash_attn` raise ImportError
    cuda = torch.device("cuda")
    assert select_backend("auto", device=cuda, dtype=torch.bfloat16, block_size=16).name == "torch"
    with pytest.raises(ValueError, match="flash-attn is unusable"):
        select_backend("flash_attn", device=cuda, dtype=torch.bfloat16, block_size=16)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        select_backend("flash_attn", device=cuda, dtype=torch.float32, block_size=16)
