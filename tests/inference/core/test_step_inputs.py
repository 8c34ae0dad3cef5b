"""Scheduled chunks to flat host arrays: the decode-only fast path builds what the general path builds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inference.core.model_io import ScheduledChunk
from inference.core.step_inputs import HostBatch, decode_batch, host_batch, mixed_batch

LIMITS = {"block_size": 16, "max_model_len": 128, "num_blocks": 16}


def test_decode_fast_path_builds_the_general_paths_inputs() -> None:
    chunks = [
        ScheduledChunk(list(range(1, 20)), 18, 1, [5, 9, 11]),
        ScheduledChunk([4, 5, 6], 2, 1, [2]),
        ScheduledChunk(list(range(40)), 31, 1, [7, 3, 1]),
    ]
    fast, general = decode_batch(chunks, **LIMITS), mixed_batch(chunks, **LIMITS)
    for name in ("input_ids", "positions", "slots"):
        assert getattr(fast, name).tolist() == getattr(general, name).tolist(), name
    assert fast.slots.tolist() == [9 * 16 + 2, 2 * 16 + 2, 3 * 16 + 15]
    assert (fast.query_lens, fast.context_lens) == (general.query_lens, general.context_lens)
    assert fast.block_tables == general.block_tables


def test_a_step_with_a_prefill_chunk_takes_the_general_path() -> None:
    chunks = [ScheduledChunk([1, 2, 3, 4], 1, 3, [6]), ScheduledChunk([7, 8], 1, 1, [2])]
    batch = host_batch(chunks, **LIMITS)
    assert batch.input_ids.tolist() == [2, 3, 4, 8]
    assert batch.positions.tolist() == [1, 2, 3, 1]
    assert batch.slots.tolist() == [97, 98, 99, 33]
    assert batch.query_lens == [3, 1] and batch.context_lens == [4, 2]


@pytest.mark.parametrize("build", [decode_batch, mixed_batch])
def test_both_paths_refuse_a_block_outside_the_cache(build: Callable[..., HostBatch]) -> None:
    with pytest.raises(ValueError, match=r"block ids must lie in \[0, 16\)"):
        build([ScheduledChunk([1, 2, 3], 2, 1, [16])], **LIMITS)
