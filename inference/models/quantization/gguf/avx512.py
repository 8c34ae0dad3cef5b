"""Small decode batches through a GGUF's blocks on CPU, with the bf16 model's own weights.

A decode step of a few sequences is bound by reading every weight once. For a GGUF's Q4_0/Q4_1
projections the kernel (csrc/avx512/block_linear.cpp) reads the 4-bit levels plus a (d, m) pair per block, 5
bytes
per 8 weights against bf16's 16, and expands each block in registers to bf16(d * q + m): exactly the bf16
weights the dequantized model holds. Q8_0 takes the same kernel with int8 levels; Q4_K, Q5_K, Q6_K and IQ4_XS
rows are read as the file stores them (csrc/avx512/kquant_linear.cpp, 4.25 to 6.6 bits per weight), expanded
to
gguf-py's dequantized values rounded to bf16. `matches` (quantization/gguf/match.py) checks that bit for bit
before a
projection takes the path, so this changes speed, not weights; only the fp32 accumulation order differs
from the dense bf16 product.
Batches of up to 16 rows take it (AMX tiles where the CPU has them and the config allows it, else
AVX512-BF16 registers, one path for every row count so a row's bits never depend on its batch); larger
ones, prefill among them, stay on the dense bf16 weights (quantization/base.py). The K-quants' decoding rows
by
default quantize their activations per 256 values instead (to 14 bits, or to 8 as llama.cpp does) and sum in
integers (csrc/avx512/kquant_int16.h, kquant_int8.h; from 5 rows on AMX-INT8 tiles where the CPU has them,
kquant_tiles.h, to the same bits): the product of the same weights with `quantized_activations(x, bits)`.

The kernel is built at install time or on first use (kernels/build.py) into the cache directory the caller
passes. Without AVX512-BF16 or a compiler, or with EngineConfig.gguf_kernels off, every batch stays on the
dense bf16 weights.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from inference.models.kernels import build
from inference.models.kernels.library import checked_kernel
from inference.models.quantization.gguf.formats import BlockMatrix, check_blocks
from inference.models.quantization.gguf.layout import BlockWeight, KQuantWeight, decode_weight
from inference.models.quantization.gguf.reference import quantized_activations

logger = logging.getLogger(__name__)


# The kquant_linear op's numbers for KQUANT_ACTIVATIONS.
KQUANT_ACTIVATIONS_OP = {"bf16": 0, "int8": 1, "int16": 2}


@dataclass(frozen=True, slots=True)
class Avx512Kernel:
    """The loaded kernel, with AMX tiles allowed or not for every call made through this handle."""

    # bf16 decoding rows on tiles at every row count (gguf_amx_decode); the integer paths take tiles anyway
    amx: bool
    max_rows: int  # 16 on either path
    activations: str = "bf16"  # K-quant decoding rows: one of KQUANT_ACTIVATIONS
    tiles: bool = True  # AMX tiles may be used at all (False: cpu_isa "avx512", registers only)

    def linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor:
        """x [..., in] bf16 with at most max_rows rows (decoding) -> [..., out] bf16."""
        # The integer paths' tiles (from kIntegerTileRows rows, on AMX-INT8) give the registers' bits, so
        # K-quant rows may take them whatever gguf_amx_decode says; Q4/Q8_0 rows follow it.
        integer = isinstance(weight, KQuantWeight) and self.activations != "bf16"
        amx = (self.amx or integer) and self.tiles
        return _linear(x, weight, bias, amx=amx, batch=False, activations=self.activations)

    def batch_linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor:
        """Any number of rows (prompt chunks, large batches) -> [..., out] bf16: AMX tiles wherever the CPU
        has them, whatever `amx` says (every prompt row takes one path), else registers."""
        return _linear(x, weight, bias, amx=self.tiles, batch=True, activations="bf16")


def _linear(
    x: torch.Tensor,
    weight: BlockWeight,
    bias: torch.Tensor | None,
    *,
    amx: bool,
    batch: bool,
    activations: str,
) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    if isinstance(weight, KQuantWeight):
        out = torch.ops.mooncake_avx512.kquant_linear(
            flat, weight.raw, weight.type_id, bias, amx, batch, KQUANT_ACTIVATIONS_OP[activations]
        )
    else:
        out = torch.ops.mooncake_avx512.block_linear(flat, weight.levels, weight.dm, bias, amx, batch)
    return out.view(*x.shape[:-1], out.shape[-1])


def load_kernel(
    cache_dir: Path,
    *,
    amx: bool = True,
    activations: str = "bf16",
    compiler: str = "c++",
    tiles: bool = True,
) -> Avx512Kernel | None:
    """The kernel, built into `cache_dir` if needed, loaded and checked once per process and setting;
    None (and a log line) wherever it cannot or must not run here."""
    if not build.cpu_supported():
        logger.info("AVX512 GGUF block kernels off: this CPU lacks AVX512-BF16 or AVX512-VNNI")
        return None
    activations = "int16" if activations == "auto" else activations
    return checked_kernel(
        ("avx512-blocks", amx and tiles, activations, tiles),
        lambda: Avx512Kernel(amx and tiles, int(torch.ops.mooncake_avx512.max_rows(amx)), activations, tiles),
        _agrees_with_dense,
        what="AVX512 GGUF block kernels",
        fallback="small batches use the dense bf16 weights",
        library=build.AVX512_LIBRARY,
        cache_dir=cache_dir,
        compiler=compiler,
    )


def _agrees_with_dense(kernel: Avx512Kernel) -> bool:
    """One-hot rows read single weights exactly, random rows match an fp32 product closely and a row alone
    gets the bits it gets among others, on the register path and (where there is AMX) the tile path."""
    checked = check_blocks()
    return all(_agrees(kernel, b) for b in checked)


def _agrees(kernel: Avx512Kernel, blocks: BlockMatrix) -> bool:
    weight = decode_weight(blocks)
    if kernel.activations != "bf16" and isinstance(weight, KQuantWeight):
        return _agrees_integer(kernel, weight, blocks)
    dense = torch.from_numpy(blocks.dequantize()).bfloat16()
    gen = torch.Generator().manual_seed(0)
    width = blocks.shape[1]
    for rows in sorted({1, 2, 3, kernel.max_rows}):
        columns = torch.randperm(width, generator=gen)[:rows]
        one_hot = torch.zeros(rows, width, dtype=torch.bfloat16)
        one_hot[torch.arange(rows), columns] = 1
        x = torch.randn(rows, width, generator=gen).bfloat16()
        expected = x.float() @ dense.float().T
        exact = torch.equal(kernel.linear(one_hot, weight, None), dense[:, columns].T)
        out = kernel.linear(x, weight, None)
        close = torch.allclose(out.float(), expected, rtol=1e-2, atol=1e-2)
        alike = torch.equal(kernel.linear(x[-1:], weight, None), out[-1:])  # a row's bits, alone or not
        if not (exact and close and alike):
            logger.warning(
                "GGUF decode kernel disagrees with the dense weights (%s) at %d rows; not using it",
                type(blocks).__name__,
                rows,
            )
            return False
    return True


def _agrees_integer(kernel: Avx512Kernel, weight: KQuantWeight, blocks: BlockMatrix) -> bool:
    """Each row within one bf16 rounding of the quantized activations' product, and alike alone or not
    and on either path."""
    dense = torch.from_numpy(blocks.dequantize()).double()
    x = torch.randn(kernel.max_rows, blocks.shape[1], generator=torch.Generator().manual_seed(0)).bfloat16()
    out = kernel.linear(x, weight, None)
    exact = quantized_activations(x, kernel.activations).double() @ dense.T
    close = bool(torch.all((out.double() - exact).abs() <= exact.abs() * 2**-8 + 1e-5))
    alike = torch.equal(kernel.linear(x[-1:], weight, None), out[-1:])
    if torch.ops.mooncake_avx512.integer_tiles_available():  # the tiles must give the registers' bits
        op, width = torch.ops.mooncake_avx512.kquant_integer_linear, KQUANT_ACTIVATIONS_OP[kernel.activations]
        alike = alike and torch.equal(*(op(x, weight.raw, weight.type_id, width, t) for t in (True, False)))
    if not (close and alike):
        logger.warning("GGUF %s decode kernel disagrees with the dense weights", kernel.activations)
        return False
    return True
