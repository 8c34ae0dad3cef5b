"""Prompt chunks over one shared cached prefix attend to it together, as if each attended alone."""

from __future__ import annotations

import pytest
import torch

from inference.attention import BatchLayout
from inference.attention.torch_backend import TorchAttentionBackend
from tests.inference.test_attention import DIM, HEADS, KV_HEADS, reference

BLOCK = 4
SHARED = [3, 7, 1]  # the prefix cache's physical blocks, shared by the first three sequences


def build(
    dtype: torch.dtype, starts_and_lens: list[tuple[int, int]], first_blocks: list[list[int]]
) -> tuple[
    torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], BatchLayout
]:
    """Caches where sequences whose tables start with the same blocks hold the same keys there."""
    gen = torch.Generator().manual_seed(1)
    k_cache = torch.zeros(40, BLOCK, KV_HEADS, DIM, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    shared_k = torch.randn(len(SHARED) * BLOCK, KV_HEADS, DIM, generator=gen).to(dtype)
    shared_v = torch.randn(len(SHARED) * BLOCK, KV_HEADS, DIM, generator=gen).to(dtype)
    free = iter(range(10, 40))
    tables, full_k, full_v, queries, slots = [], [], [], [], []
    for (start, n), first in zip(starts_and_lens, first_blocks, strict=True):
        total = start + n
        table = first + [next(free) for _ in range(-(-total // BLOCK) - len(first))]
        k = torch.randn(total, KV_HEADS, DIM, generator=gen).to(dtype)
        v = torch.randn(total, KV_HEADS, DIM, generator=gen).to(dtype)
        if first == SHARED[: len(first)]:
            k[: len(first) * BLOCK], v[: len(first) * BLOCK] = (
                shared_k[: len(first) * BLOCK],
                shared_v[: len(first) * BLOCK],
            )
        seq_slots = [table[p // BLOCK] * BLOCK + p % BLOCK for p in range(total)]
        k_cache.view(-1, KV_HEADS, DIM)[seq_slots[:start]] = k[:start]
        v_cache.view(-1, KV_HEADS, DIM)[seq_slots[:start]] = v[:start]
        tables.append(table)
        full_k.append(k)
        full_v.append(v)
        queries.append(torch.randn(n, HEADS, DIM, generator=gen).to(dtype))
        slots.extend(seq_slots[start:])
    layout = BatchLayout(
        query_lens=[n for _, n in starts_and_lens],
        context_lens=[s + n for s, n in starts_and_lens],
        block_tables=tables,
        slot_mapping=torch.tensor(slots),
        block_size=BLOCK,
        device=torch.device("cpu"),
    )
    return k_cache, v_cache, queries, full_k, full_v, layout


# Three chunks continue the shared prefix (one starting mid-block, one capping the shared run at two
# blocks), one has its own first block, one decodes, one is a whole prompt.
CASES = [(12, 5), (14, 3), (9, 6), (6, 4), (10, 1), (0, 7)]
FIRSTS = [SHARED, SHARED, SHARED, [30], SHARED[:1], []]


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_grouped_chunks_attend_as_each_alone(dtype: torch.dtype, tolerance: float) -> None:
    k_cache, v_cache, queries, full_k, full_v, layout = build(dtype, CASES, FIRSTS)
    backend = TorchAttentionBackend()
    meta = backend.build_metadata(layout)
    # The chunks at 12, 14 and 9 share the prefix; the one at 9 sees only two whole blocks before it.
    # The decode row (first block 3 too) is a decode, and the chunk with its own block attends alone.
    [group] = meta.shared_prefixes
    assert len(group.tails) == 3 and group.length == 2 * BLOCK
    assert len(meta.prefills) == 2  # the chunk over block 30, and the whole prompt
    out = backend.forward(
        torch.cat(queries),
        torch.cat([k[s:] for (s, _), k in zip(CASES, full_k, strict=True)]),
        torch.cat([v[s:] for (s, _), v in zip(CASES, full_v, strict=True)]),
        k_cache,
        v_cache,
        meta,
        DIM**-0.5,
    )
    expected = torch.cat(
        [reference(q.float(), k.float(), v.float()) for q, k, v in zip(queries, full_k, full_v, strict=True)]
    )
    torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)


def test_one_chunk_or_no_common_block_attends_alone() -> None:
    backend = TorchAttentionBackend()
    _, _, _, _, _, layout = build(torch.float32, [(8, 4), (6, 2)], [SHARED, [30]])
    meta = backend.build_metadata(layout)
    assert meta.shared_prefixes == [] and len(meta.prefills) == 2
    _, _, _, _, _, layout = build(torch.float32, [(8, 4)], [SHARED])
    assert backend.build_metadata(layout).shared_prefixes == []
