"""What both fused decode stacks (fused_layers.py for AVX512, fused_avx2.py) do alike with a step's rows:
the block table each call reads, and a step cut into calls of at most max_rows rows."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

RunRows = Callable[[np.ndarray, np.ndarray, np.ndarray, list[list[int]]], torch.Tensor]


def block_table(block_tables: list[list[int]], positions: np.ndarray, block_size: int) -> np.ndarray:
    """Each row's blocks up to its own position, zero-padded to the call's longest row."""
    used = -(-(positions + 1) // block_size)
    table = np.zeros((len(block_tables), int(used.max())), dtype=np.int32)
    for row, (blocks, n) in enumerate(zip(block_tables, used.tolist(), strict=True)):
        table[row, :n] = blocks[:n]
    return table


def in_calls(
    run: RunRows,
    max_rows: int,
    input_ids: np.ndarray,
    positions: np.ndarray,
    slots: np.ndarray,
    block_tables: list[list[int]],
) -> torch.Tensor:
    """`run` over any number of rows, max_rows at a time and in order: a later row of one sequence sees the
    keys an earlier call wrote, and a row's sums never depend on the other rows of its call."""
    if len(input_ids) <= max_rows:
        return run(input_ids, positions, slots, block_tables)
    parts = [slice(a, a + max_rows) for a in range(0, len(input_ids), max_rows)]
    return torch.cat([run(input_ids[p], positions[p], slots[p], block_tables[p]) for p in parts])
