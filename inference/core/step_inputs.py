"""One step's scheduled chunks as flat host arrays (token ids, positions, KV slots), validated.

Decode-only steps, the common case, take plain integer arithmetic; steps with prefill chunks use numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inference.core.model_io import ScheduledChunk


@dataclass(slots=True)
class HostBatch:
    """One step's flat inputs on the host, in chunk order."""

    input_ids: np.ndarray
    positions: np.ndarray
    slots: np.ndarray
    query_lens: list[int]
    context_lens: list[int]
    block_tables: list[list[int]]

    def row_offsets(self) -> list[int]:
        """Where each chunk's rows start in the flat arrays, and (last) the total."""
        return np.concatenate(([0], np.cumsum(self.query_lens))).astype(int).tolist()

    def subset(self, chunks: list[int]) -> tuple[HostBatch, np.ndarray]:
        """The batch of just these chunks (in this order), and the flat rows they came from."""
        starts = self.row_offsets()
        rows = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in chunks])
        sub = HostBatch(
            input_ids=self.input_ids[rows],
            positions=self.positions[rows],
            slots=self.slots[rows],
            query_lens=[self.query_lens[i] for i in chunks],
            context_lens=[self.context_lens[i] for i in chunks],
            block_tables=[self.block_tables[i] for i in chunks],
        )
        return sub, rows


def host_batch(
    chunks: list[ScheduledChunk], *, block_size: int, max_model_len: int, num_blocks: int
) -> HostBatch:
    if not chunks:
        raise ValueError("execute() needs at least one chunk")
    limits = {"block_size": block_size, "max_model_len": max_model_len, "num_blocks": num_blocks}
    if all(c.num_tokens == 1 for c in chunks):
        return decode_batch(chunks, **limits)
    return mixed_batch(chunks, **limits)


def mixed_batch(
    chunks: list[ScheduledChunk], *, block_size: int, max_model_len: int, num_blocks: int
) -> HostBatch:
    bs = block_size
    ids: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    for i, c in enumerate(chunks):
        end = c.start + c.num_tokens
        if c.num_tokens < 1 or c.start < 0 or end > len(c.token_ids):
            raise ValueError(
                f"chunk {i}: start={c.start} num_tokens={c.num_tokens} with {len(c.token_ids)} tokens"
            )
        if end > max_model_len:
            raise ValueError(f"chunk {i}: {end} tokens exceed max_model_len={max_model_len}")
        table = np.asarray(c.block_table[: -(-end // bs)], dtype=np.int64)
        if len(table) * bs < end:
            raise ValueError(f"chunk {i}: block_table covers {len(table) * bs} positions, needs {end}")
        if table.size and (table.min() < 0 or table.max() >= num_blocks):
            raise ValueError(f"chunk {i}: block ids must lie in [0, {num_blocks})")
        pos = np.arange(c.start, end, dtype=np.int64)
        positions.append(pos)
        slots.append(table[pos // bs] * bs + pos % bs)
        ids.append(np.asarray(c.token_ids[c.start : end], dtype=np.int64))
    return HostBatch(
        input_ids=np.concatenate(ids),
        positions=np.concatenate(positions),
        slots=np.concatenate(slots),
        query_lens=[c.num_tokens for c in chunks],
        context_lens=[c.start + c.num_tokens for c in chunks],
        block_tables=[c.block_table for c in chunks],
    )


def decode_batch(
    chunks: list[ScheduledChunk], *, block_size: int, max_model_len: int, num_blocks: int
) -> HostBatch:
    """One new token per chunk: plain integer arithmetic, ~10x cheaper than numpy per chunk.

    Only the block the new token lands in is checked; earlier ones were when their tokens were.
    """
    bs = block_size
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    for i, c in enumerate(chunks):
        pos = c.start
        if pos < 0 or pos >= len(c.token_ids):
            raise ValueError(f"chunk {i}: start={c.start} num_tokens=1 with {len(c.token_ids)} tokens")
        if pos >= max_model_len:
            raise ValueError(f"chunk {i}: {pos + 1} tokens exceed max_model_len={max_model_len}")
        if pos // bs >= len(c.block_table):
            needed = pos + 1
            raise ValueError(
                f"chunk {i}: block_table covers {len(c.block_table) * bs} positions, needs {needed}"
            )
        block = c.block_table[pos // bs]
        if not 0 <= block < num_blocks:
            raise ValueError(f"chunk {i}: block ids must lie in [0, {num_blocks})")
        ids.append(c.token_ids[pos])
        positions.append(pos)
        slots.append(block * bs + pos % bs)
    return HostBatch(
        input_ids=np.array(ids, dtype=np.int64),
        positions=np.array(positions, dtype=np.int64),
        slots=np.array(slots, dtype=np.int64),
        query_lens=[1] * len(chunks),
        context_lens=[p + 1 for p in positions],
        block_tables=[c.block_table for c in chunks],
    )
