"""Loading a GGUF's block-read projections without ever holding their dense bf16 weights.

Where a model keeps no dense copy (gguf_dense_copy off), each projection whose shards the file stores in
types the kernels read gets no dense parameter at all: its weight stays empty while the model is
materialized, and nothing dequantizes it whole. A few of its rows (at the start, middle and end) are
expanded by the kernels and compared bit for bit with gguf-py's dequantization of the same blocks, rounded
to bf16, as `matches` compares a layer that keeps its dense copy. A disagreement (which would be a kernel
bug, or blocks mapped to the wrong rows) raises BlocksDisagree: the loader then loads again with the dense
copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.layers.linear import Linear
from inference.models.quantization.gguf.formats import BlockMatrix, GGUFBlocks, row_slice
from inference.models.quantization.gguf.layout import decode_weights, eligible
from inference.models.quantization.gguf.match import dequantized_bf16
from inference.models.quantization.gguf.method import BlockKernel, GGUFBlocksMethod
from inference.models.quantization.setup import projection_blocks


class BlocksDisagree(ValueError):
    """A checkpoint tensor is not bit for bit its blocks' expansion."""


@dataclass
class BlockOnlyLoad:
    """The projections of one load that take their blocks only, by module name."""

    shards: dict[str, list[BlockMatrix]]
    sources: dict[str, BlockMatrix] = field(default_factory=dict)  # checkpoint tensor name -> its blocks
    checked: set[str] = field(default_factory=set)

    @classmethod
    def plan(cls, model: DecoderForCausalLM, blocks: GGUFBlocks) -> BlockOnlyLoad:
        """Every projection whose shards are all in the file in types the kernels read (call on meta)."""
        names = {module: name for name, module in model.named_modules()}
        shards: dict[str, list[BlockMatrix]] = {}
        for module, stacked in projection_blocks(model, blocks.linears):
            if stacked and all(map(eligible, stacked)):
                shards[names[module]] = stacked
        sources = {
            source: block
            for source, block in blocks.linears.items()
            if any(block is s for stacked in shards.values() for s in stacked)
        }
        return cls(shards, sources)

    def drop_dense(self, model: DecoderForCausalLM) -> None:
        """Give each planned projection an empty weight before the model is materialized."""
        for name in self.shards:
            linear = _linear(model, name)
            empty = torch.empty(0, dtype=linear.weight.dtype, device="meta")
            linear.weight = nn.Parameter(empty, requires_grad=False)

    def takes(self, name: str, rows: Callable[[int, int], torch.Tensor]) -> bool:
        """For load_weights: whether checkpoint tensor `name` belongs to a planned projection, checked
        against its blocks (raises BlocksDisagree where it is not their expansion). `rows(start, stop)`
        reads those rows of the reference: only pairs at its start, middle and end (a row permutation, or an
        expansion that differs, shows there)."""
        blocks = self.sources.get(name)
        if blocks is None:
            return False
        count = blocks.shape[0]
        for start in sorted({0, max(count // 2 - 1, 0), max(count - 2, 0)}):
            stop = min(start + 2, count)
            part, stored = row_slice(blocks, start, stop), rows(start, stop)  # only the rows compared
            if not _same_rows(part, stored):
                raise BlocksDisagree(f"{name}: the file's blocks do not expand to the checkpoint's weights")
        self.checked.add(name)
        return True

    def attach(
        self, model: DecoderForCausalLM, kernel: BlockKernel, *, parsed: dict[str, BlockMatrix]
    ) -> None:
        """Each planned projection reads its blocks from now on (call after load_weights). Once one is in the
        kernels' layout, its parsed blocks are dropped from here and from `parsed` (GGUFBlocks.linears), so
        loading never holds the blocks twice over."""
        missing = sorted(set(self.sources) - self.checked)
        if missing:
            raise ValueError(f"checkpoint is missing weights: {', '.join(missing[:8])}")
        for name in list(self.shards):
            stacked = self.shards.pop(name)
            _linear(model, name).use(GGUFBlocksMethod(decode_weights(stacked), kernel))
            for source in [s for s, block in self.sources.items() if any(block is b for b in stacked)]:
                del self.sources[source]
                parsed.pop(source, None)
            del stacked


def _same_rows(blocks: BlockMatrix, stored: torch.Tensor) -> bool:
    """Whether reference rows `stored` (float32) round to the blocks' bf16 expansion."""
    return torch.equal(dequantized_bf16(blocks), stored.to(torch.bfloat16))


def _linear(model: DecoderForCausalLM, name: str) -> Linear:
    module = model.get_submodule(name)
    if not isinstance(module, Linear):
        raise TypeError(f"{name} is not a Linear")
    return module
