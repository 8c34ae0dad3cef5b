"""CUDA graphs for decode steps: one captured forward per batch size, replayed over fixed device buffers.

A decode step of a small model is hundreds of kernel launches of a few microseconds each; replaying a
graph issues them all at once. A batch is padded up to the next captured size: padding rows write no
KV (slot -1) and attend over one position of block 0, and their outputs are dropped. The LM head runs
outside the graph, so captured memory stays at one step's activations and not a logits buffer per size.
"""

from __future__ import annotations

import bisect
import logging
import time
from typing import Any, Protocol

import numpy as np
import torch

from inference.core.model_io import InFlightIds
from inference.models.architectures.decoder import DecoderForCausalLM

logger = logging.getLogger(__name__)

CAPTURE_SIZES = (1, 2, 4, 8, *range(16, 257, 16))


class GraphableBackend(Protocol):
    def graph_metadata(
        self, slot_mapping: torch.Tensor, block_table: torch.Tensor, context_lens: torch.Tensor
    ) -> Any: ...


class DecodeGraphs:
    def __init__(
        self,
        model: DecoderForCausalLM,
        backend: GraphableBackend,
        *,
        max_batch: int,
        block_size: int,
        max_blocks_per_seq: int,
        device: torch.device,
    ) -> None:
        self.model = model
        self.block_size = block_size
        self.backend = backend
        largest = min(max_batch, CAPTURE_SIZES[-1])
        self.sizes = [size for size in CAPTURE_SIZES if size < largest] + [largest]
        self.device = device
        self.input_ids = torch.zeros(largest, dtype=torch.int64, device=device)
        self.positions = torch.zeros(largest, dtype=torch.int64, device=device)
        self.slots = torch.full((largest,), -1, dtype=torch.int64, device=device)
        self.block_table = torch.zeros((largest, max_blocks_per_seq), dtype=torch.int32, device=device)
        self.context_lens = torch.ones(largest, dtype=torch.int32, device=device)
        # Pinned staging: each replay's inputs go up in asynchronous copies, and the next refill waits on
        # an event recorded after them (normally long done: a step ends by reading its tokens back).
        pinned = device.type == "cuda"
        self._uploaded = torch.cuda.Event() if pinned else None
        self._host = {
            name: torch.empty(tuple(buf.shape), dtype=buf.dtype, pin_memory=pinned)
            for name, buf in self._buffers().items()
        }
        # numpy views of the same memory, filled each step
        self._host_arrays = {name: tensor.numpy() for name, tensor in self._host.items()}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.hidden: dict[int, torch.Tensor] = {}

    @property
    def max_batch(self) -> int:
        return self.sizes[-1]

    def _buffers(self) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids,
            "positions": self.positions,
            "slots": self.slots,
            "block_table": self.block_table,
            "context_lens": self.context_lens,
        }

    def _forward(self, size: int) -> torch.Tensor:
        meta = self.backend.graph_metadata(
            self.slots[:size], self.block_table[:size], self.context_lens[:size]
        )
        return self.model(self.input_ids[:size], self.positions[:size], meta)

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every size, largest first, all in one memory pool (only one replays at a time)."""
        started = time.perf_counter()
        pool = None
        for size in reversed(self.sizes):
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):  # warm-up: compiles the Triton kernels and runs lazy set-ups
                self._forward(size)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.hidden[size] = self._forward(size)
            pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - started
        logger.info("Captured CUDA graphs for decode batch sizes %s in %.1fs", self.sizes, elapsed)

    def padded_size(self, batch: int) -> int | None:
        """The captured size a batch of this many decode rows runs at, or None when it is too large."""
        index = bisect.bisect_left(self.sizes, batch)
        return self.sizes[index] if index < len(self.sizes) else None

    def run(
        self,
        input_ids: np.ndarray,
        positions: np.ndarray,
        slots: np.ndarray,
        block_tables: list[list[int]],
        context_lens: list[int],
        in_flight: InFlightIds | None = None,
    ) -> torch.Tensor:
        """Hidden states [batch, hidden] of one decode step; the arrays are per row, in batch order.

        in_flight: ids still on the device (async scheduling), written over input_ids' placeholders.
        """
        batch = len(input_ids)
        size = self.padded_size(batch)
        if size is None:
            raise ValueError(f"a decode batch of {batch} exceeds the largest captured size {self.max_batch}")
        if self._uploaded is not None:
            self._uploaded.synchronize()
        host = self._host_arrays
        host["input_ids"][:batch] = input_ids
        host["input_ids"][batch:size] = 0
        host["positions"][:batch] = positions
        host["positions"][batch:size] = 0
        host["slots"][:batch] = slots
        host["slots"][batch:size] = -1
        host["context_lens"][:batch] = context_lens
        host["context_lens"][batch:size] = 1
        table = host["block_table"]
        table[:size] = 0
        block_size = self.block_size
        for row, (blocks, length) in enumerate(zip(block_tables, context_lens, strict=True)):
            used = -(-length // block_size)
            table[row, :used] = blocks[:used]
        for name, buffer in self._buffers().items():
            buffer[:size].copy_(self._host[name][:size], non_blocking=True)
        if in_flight is not None:
            in_flight.patch(self.input_ids)
        if self._uploaded is not None:
            self._uploaded.record()
        if self.device.type == "cuda":
            self.graphs[size].replay()
            return self.hidden[size][:batch]
        # Off CUDA (tests, with Triton's interpreter) the same padded buffers run eagerly.
        return self._forward(size)[:batch]
