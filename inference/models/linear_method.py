"""How a linear layer holds its weights and multiplies with them: one LinearMethod per layer, chosen at load.

As in vLLM, the layer only calls `method.apply`; what the weights are (the dense parameter, a oneDNN
prepacked copy, our AMX tile layout, torch's int4 layout, a GGUF's own blocks) is the method's business,
so the choice is made once, in `choose_method`, from what the loader allows (`LinearPlan`) and what the
file holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
import torch.nn.functional as F

from inference.models.block_match import matches
from inference.models.gguf_blocks import BlockMatrix, Q4Blocks
from inference.models.int4 import Int4Weight, int4_linear, pack_int4
from inference.models.onednn import pack_weight, packed_linear
from inference.models.q4_decode import BlockWeight, decode_weights, eligible
from inference.models.tile_linear import TileWeight, pack_tiles, tile_linear


class LinearMethod(ABC):
    name: ClassVar[str]

    @property
    def keeps_dense(self) -> bool:
        """Whether the layer's dense weight must stay (False: the method holds all it multiplies with)."""
        return False

    @abstractmethod
    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [..., in] -> [..., out]; `weight` is the layer's dense parameter (empty once dropped)."""

    def nbytes(self) -> int:
        """Memory held beyond the layer's parameters (those are counted with the model's)."""
        return 0


class DenseMethod(LinearMethod):
    name = "dense"

    @property
    def keeps_dense(self) -> bool:
        return True

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, weight, bias)


DENSE = DenseMethod()  # stateless: every layer that multiplies its own parameter shares it


class PackedMethod(LinearMethod):
    """oneDNN's prepacked bf16 weight (onednn.py): bitwise F.linear's result, one weight read per call."""

    name = "packed"

    def __init__(self, packed: torch.Tensor) -> None:
        self.packed = packed

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return packed_linear(x, self.packed, bias)

    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size()


class TileMethod(LinearMethod):
    """Our AMX tile kernel's packed bf16 weight (tile_linear.py): each row's bits independent of its batch."""

    name = "tiles"

    def __init__(self, weight: TileWeight) -> None:
        self.weight = weight

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return tile_linear(x, self.weight, bias)

    def nbytes(self) -> int:
        return self.weight.nbytes()


class Int4Method(LinearMethod):
    """quantization="gguf": the file's Q4 levels in torch's int4 layout, for every batch size (int4.py)."""

    name = "int4"

    def __init__(self, weight: Int4Weight) -> None:
        self.weight = weight

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return int4_linear(x, self.weight, bias)

    def nbytes(self) -> int:
        return self.weight.nbytes()


class BlockKernel(Protocol):
    """Multiplies activations with a GGUF's blocks: q4_decode.Q4Kernel (bf16, AVX512) or
    avx2_blocks.Avx2Kernel (fp32, AVX2)."""

    @property
    def max_rows(self) -> int:
        """The most rows `linear` takes; more go to `batch_linear` (or the dense copy)."""

    def linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor: ...

    def batch_linear(
        self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None
    ) -> torch.Tensor: ...


_blocks_allowed: ContextVar[bool] = ContextVar("blocks_for_small_batches", default=True)


@contextmanager
def blocks_for_small_batches(allowed: bool) -> Iterator[None]:
    """Within: whether GGUFDecodeMethod may read its blocks for small batches. The runner turns that off
    for steps that carry prompt chunks, so a prompt's projections are the dense path's whatever its length
    (row for row the same bits at any batch size: AMX tiles, or oneDNN's AVX512-BF16 kernels)."""
    token = _blocks_allowed.set(allowed)
    try:
        yield
    finally:
        _blocks_allowed.reset(token)


class GGUFDecodeMethod(LinearMethod):
    """Decoding batches of up to kernel.max_rows rows read the GGUF's blocks (q4_decode.py). Larger ones,
    prompt chunks among them, go to `fallback` where the model keeps a dense bf16 copy (the tiled or packed
    weights), else through the blocks too, on the kernel's batch path: then the blocks are the layer's only
    copy of its weights. A fused projection whose shards the file stores in different types holds one part
    per type, row after row; each output row's sum is the same either way."""

    name = "gguf-decode"

    def __init__(
        self, parts: Sequence[BlockWeight], kernel: BlockKernel, fallback: LinearMethod | None
    ) -> None:
        self.parts, self.kernel, self.fallback = list(parts), kernel, fallback

    @property
    def keeps_dense(self) -> bool:
        return self.fallback is not None and self.fallback.keeps_dense

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        multiply = self.kernel.linear
        if not (x.numel() <= self.kernel.max_rows * x.shape[-1] and _blocks_allowed.get()):
            if self.fallback is not None:
                return self.fallback.apply(x, weight, bias)
            multiply = self.kernel.batch_linear
        if len(self.parts) == 1:
            return multiply(x, self.parts[0], bias)
        outs, start = [], 0
        for part in self.parts:
            stop = start + part.out_features
            outs.append(multiply(x, part, None if bias is None else bias[start:stop]))
            start = stop
        return torch.cat(outs, dim=-1)

    def nbytes(self) -> int:
        fallback = self.fallback.nbytes() if self.fallback is not None else 0
        return sum(part.nbytes() for part in self.parts) + fallback


class GGUFBlocksMethod(GGUFDecodeMethod):
    """GGUFDecodeMethod with no dense copy: every batch reads the blocks."""

    name = "gguf-blocks"

    def __init__(self, parts: Sequence[BlockWeight], kernel: BlockKernel) -> None:
        super().__init__(parts, kernel, None)


@dataclass(frozen=True, slots=True)
class LinearPlan:
    """What the loader allows for one model (from its device, dtype, config and the file)."""

    pack: bool = False  # prepack dense bf16 weights for oneDNN (CPUs with native bf16)
    tiles: bool = False  # dense bf16 weights through our AMX tile kernel instead (CPUs with AMX)
    int4: bool = False  # quantization="gguf": Q4_0/Q4_1 projections in torch's int4 layout
    kernel: BlockKernel | None = None  # small batches may read a GGUF's blocks through this kernel
    dense_copy: bool = True  # with a kernel: keep the dense bf16 weights for larger batches and prompts
    embedding_blocks: bool = False  # the token embedding looks its rows up in the file's blocks too


def choose_method(
    dense: torch.Tensor, shards: Sequence[BlockMatrix] | None, plan: LinearPlan
) -> LinearMethod:
    """The method for a layer whose loaded dense weight is `dense` and whose blocks in the file (if the
    file has all of them in types we read) are `shards`, stacked row-wise in the layer's order (one for an
    unfused layer). Call before the dense weight is dropped."""
    if shards:
        shape = (sum(s.shape[0] for s in shards), shards[0].shape[1])
        if shape != tuple(dense.shape):
            raise ValueError(f"blocks of shape {shape} for a linear of shape {tuple(dense.shape)}")
    q4 = [s for s in shards or () if isinstance(s, Q4Blocks)]
    if plan.int4 and q4 and len(q4) == len(shards or ()):
        return Int4Method(pack_int4(Q4Blocks.stack(q4)))
    # Only where the blocks are bit for bit the dense weights: decoding through them changes speed, never
    # outputs (the batch path that replaces a dropped dense copy sums in its own fixed order).
    if plan.kernel is not None and shards and all(map(eligible, shards)) and matches(shards, dense):
        if plan.dense_copy:
            return GGUFDecodeMethod(decode_weights(shards), plan.kernel, _dense_method(dense, plan))
        return GGUFBlocksMethod(decode_weights(shards), plan.kernel)
    return _dense_method(dense, plan)


def _dense_method(dense: torch.Tensor, plan: LinearPlan) -> LinearMethod:
    if plan.tiles:
        return TileMethod(pack_tiles(dense))
    if plan.pack:
        return PackedMethod(pack_weight(dense))
    return DENSE
