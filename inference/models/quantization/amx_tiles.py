"""Dense bf16 linears through AMX tiles (csrc/avx512/tile_linear.cpp), on CPUs with AMX.

oneDNN's prepacked linears (quantization/onednn.py) block the reduction by the row count on AMX, so there a
row's bits
depended on how many rows shared its call: a prompt's logits changed with how it was cut into chunks, and
identical requests could get different answers. Our tile kernel computes every output element from zero
through the same tile multiply-adds over K in the same order, so each row gets the same bits at any batch
size; `load_tiles` checks that, and closeness to an fp32 product, before any model uses it. It is also no
slower than oneDNN here (docs/design/determinism.md). CPUs without AMX keep oneDNN, whose AVX512-BF16
kernels are row-invariant already (measured, and checked by the tests).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from inference.models.kernels.build import AVX512_LIBRARY
from inference.models.kernels.library import checked_kernel
from inference.models.quantization.base import LinearMethod

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TileWeight:
    """A dense [out, in] bf16 weight in the kernel's tile layout."""

    packed: torch.Tensor  # [ceil(out / 16), ceil(in / 32), 16, 16, 2] bf16, zero past the weight
    out_features: int

    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size()


def pack_tiles(dense: torch.Tensor) -> TileWeight:
    """Reorder a dense [out, in] bf16 weight into tiles (once, at load)."""
    packed = torch.ops.mooncake_avx512.pack_tiles(dense.detach().contiguous())
    return TileWeight(packed, int(dense.shape[0]))


def tile_linear(x: torch.Tensor, weight: TileWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] bf16 @ W.T + bias -> [..., out] bf16: fp32 sums, one rounding to bf16 at the end."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.ops.mooncake_avx512.tile_linear(flat, weight.packed, weight.out_features, bias)
    return out.view(*x.shape[:-1], weight.out_features)


def cpu_has_amx() -> bool:
    try:
        return bool(torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without the probe
        return False


def load_tiles(cache_dir: Path, *, compiler: str = "c++") -> bool:
    """Whether dense bf16 linears go through tiles here: an AMX CPU, the native library (built into
    `cache_dir` if needed) and a passing self-check; False, with a log line, elsewhere."""
    if not cpu_has_amx():
        return False
    return bool(
        checked_kernel(
            "amx-tiles",
            lambda: True,
            lambda _: _tiles_agree(),
            what="AMX tile linears",
            fallback="bf16 linears stay on oneDNN, where a row's bits may depend on its batch",
            library=AVX512_LIBRARY,
            cache_dir=cache_dir,
            compiler=compiler,
        )
    )


def _tiles_agree() -> bool:
    """Rows in one call equal an fp32 product within one bf16 rounding, and each row's bits do not
    depend on how many rows share its call (ragged sizes: every edge of the tiling)."""
    if not torch.ops.mooncake_avx512.amx_available():
        logger.info("The kernel may not use AMX tiles in this process; bf16 linears stay on oneDNN")
        return False
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(70, 100, generator=gen).bfloat16()
    bias = torch.randn(70, generator=gen).bfloat16()
    x = torch.randn(37, 100, generator=gen).bfloat16()
    tiles = pack_tiles(weight)
    full = tile_linear(x, tiles, bias)
    exact = x.float() @ weight.float().T + bias.float()
    close = bool(torch.all((full.float() - exact).abs() <= exact.abs() * 2**-7 + 1e-3))
    cuts = ((0, 1), (5, 22), (36, 37))
    alike = all(torch.equal(tile_linear(x[a:b], tiles, bias), full[a:b]) for a, b in cuts)
    return close and alike


class TileMethod(LinearMethod):
    """Our AMX tile kernel's packed bf16 weight : each row's bits independent of its batch."""

    name = "tiles"

    def __init__(self, weight: TileWeight) -> None:
        self.weight = weight

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return tile_linear(x, self.weight, bias)

    def nbytes(self) -> int:
        return self.weight.nbytes()
