"""A GGUF's blocks read as stored on CPUs without AVX512-BF16 (csrc/avx2/blocks.cpp), for fp32 models.

Such a CPU multiplies bf16 no faster than fp32, so there `dtype: auto` is fp32, and a dequantized GGUF would
hold four bytes per weight: an 8B Q4_K_M file (4.9 GB) would take 32 GB. Instead every projection whose
blocks the file stores in Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K or IQ4_XS keeps only those blocks, and every
batch (decoding rows, prompt chunks) multiplies them with its activations quantized, one scale per 32 values
for Q4/Q8_0 blocks and per 256 for K-quants, to int8 as llama.cpp does on these CPUs or to 14 bits: the
result is `quantized_input(x, wide, block) @ W.T` for gguf-py's dequantized W, summed in fp32 (the
K-quants' super-blocks in exact int32 first). Which, by default, is measured (activations_for): int8 for a
file of Q4_0/Q4_1/Q8_0 blocks, 14 bits for one with K-quants. The bundled model's first 16 greedy tokens
agree with its fp32 reference on 3 of 8 prompts with int8 activations, on 8 of 8 with 14 bits; its
perplexity stays nearer that reference than llama.cpp's either way.
The library is built apart from the AVX512 one (kernels/build.py's AVX2_LIBRARY) and only taken for fp32
models
whose dtype was left to `auto`: an explicit float32 keeps the dense weights, whose outputs match an fp32
reference token for token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from inference.models.kernels import build
from inference.models.kernels.library import checked_kernel
from inference.models.quantization.gguf.formats import SUPER_BLOCK, BlockMatrix, KQuantBlocks, check_blocks
from inference.models.quantization.gguf.layout import BlockWeight, KQuantWeight, decode_weight

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Avx2Kernel:
    """The loaded library: one path for every row count (a row's result never depends on its batch)."""

    wide: bool = True  # 14-bit activations (else int8)
    max_rows: int = 1 << 30  # decoding rows and prompt chunks alike read the blocks

    def linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor:
        """x [..., in] (fp32, or any float type, computed in fp32) -> [..., out] in x's dtype."""
        flat = x.reshape(-1, x.shape[-1])
        if isinstance(weight, KQuantWeight):
            out = torch.ops.mooncake_avx2.kquant_linear(flat, weight.raw, weight.type_id, bias, self.wide)
        else:
            out = torch.ops.mooncake_avx2.block_linear(flat, weight.levels, weight.dm, bias, self.wide)
        return out.view(*x.shape[:-1], out.shape[-1])

    def batch_linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor:
        return self.linear(x, weight, bias)


def activations_for(setting: str, tensor_types: frozenset[str] | None) -> str:
    """The kquant_activations setting for one file: "auto" is int8 where its blocks are all Q4_0/Q4_1/Q8_0,
    and 14 bits where it has K-quants. bench/perplexity.py measured int8 within llama.cpp's distance of the
    fp32 reference for Q4_1 and Q8_0 files, but not for Q4_K_M or Q6_K ones (their Q4_0/Q5_0/Q8_0
    fallbacks, for rows no multiple of 256, included)."""
    if setting != "auto":
        return setting
    kquants = any(name.endswith("_K") or name.startswith("IQ") for name in tensor_types or ())
    return "int16" if kquants else "int8"


def quantized_input(x: torch.Tensor, wide: bool, block: int = 32) -> torch.Tensor:
    """x [rows, in] as the kernels see it: 14-bit or int8 levels times their scales, one per `block` values
    (32 for Q4_0/Q4_1/Q8_0 blocks, 256 for K-quant super-blocks), in fp32."""
    return torch.ops.mooncake_avx2.quantized_input(x, block, wide)


def load_avx2_kernel(
    cache_dir: Path, *, activations: str = "int16", compiler: str = "c++"
) -> Avx2Kernel | None:
    """The kernel, built into `cache_dir` if needed and checked once per process; None (and a log line)
    wherever it cannot or must not run here. `activations` is the kquant_activations setting (for a file:
    activations_for): "int8" is llama.cpp's int8; "int16", "bf16" (which these CPUs do not multiply
    natively) and "auto" before a file decides take 14 bits."""
    if not build.avx2_supported():
        logger.info("GGUF block kernels off: this CPU lacks AVX2")
        return None
    wide = activations != "int8"
    return checked_kernel(
        ("avx2-blocks", wide),
        lambda: Avx2Kernel(wide),
        lambda kernel: all(agrees(kernel, blocks) for blocks in check_blocks()),
        what="AVX2 GGUF block kernels",
        fallback="GGUFs load dequantized to fp32",
        library=build.AVX2_LIBRARY,
        cache_dir=cache_dir,
        compiler=compiler,
    )


def agrees(kernel: Avx2Kernel, blocks: BlockMatrix, rows: int = 5) -> bool:
    """Whether the kernel's product equals `quantized_input(x) @ W.T` in float64 within fp32 summation error,
    for gguf-py's dequantized W, and a row alone gets the bits it gets among others. The error is bounded by
    the sum's size, |x| times the row's largest weight: a block's offset (minimum) is summed apart from its
    levels, and the two may cancel."""
    out_features, in_features = blocks.shape
    x = torch.randn(rows, in_features, generator=torch.Generator().manual_seed(0))
    weight = decode_weight(blocks)
    dense = torch.from_numpy(np.asarray(blocks.dequantize(), dtype=np.float64)).view(
        out_features, in_features
    )
    xq = quantized_input(x, kernel.wide, SUPER_BLOCK if isinstance(blocks, KQuantBlocks) else 32).double()
    exact = xq @ dense.T
    out = kernel.linear(x, weight, None)
    bound = 1e-5 * xq.abs().sum(1, keepdim=True) * dense.abs().amax(1) + 1e-6
    alike = torch.equal(kernel.linear(x[-1:], weight, None), out[-1:])
    return bool(((out.double() - exact).abs() <= bound).all()) and alike
