"""Small decode batches through a GGUF's blocks on CPU, with the bf16 model's own weights.

A decode step of a few sequences is bound by reading every weight once. For a GGUF's Q4_0/Q4_1
projections the kernel (csrc/q4_decode.cpp) reads the 4-bit levels plus a (d, m) pair per block, 5 bytes
per 8 weights against bf16's 16, and expands each block in registers to bf16(d * q + m): exactly the bf16
weights the dequantized model holds. Q8_0 takes the same kernel with int8 levels; Q4_K, Q5_K, Q6_K and IQ4_XS
rows are read as the file stores them (csrc/kquant_linear.cpp, 4.25 to 6.6 bits per weight), expanded to
gguf-py's dequantized values rounded to bf16. `matches` (block_match.py) checks that bit for bit before a
projection takes the path, so this changes speed, not weights; only the fp32 accumulation order differs
from the dense bf16 product.
Batches of up to 16 rows take it (AMX tiles where the CPU has them and the config allows it, else
AVX512-BF16 registers, one path for every row count so a row's bits never depend on its batch); larger
ones, prefill among them, stay on the dense bf16 weights (linear_method.py). The K-quants' decoding rows by
default quantize their activations per 256 values instead (to 14 bits, or to 8 as llama.cpp does) and sum in
integers (csrc/kquant_int16.h, kquant_int8.h; from 5 rows on AMX-INT8 tiles where the CPU has them,
kquant_tiles.h, to the same bits): the product of the same weights with `quantized_activations(x, bits)`.

The kernel is built at install time or on first use (kernel_build.py) into the cache directory the caller
passes. Without AVX512-BF16 or a compiler, or with EngineConfig.q4_decode off, every batch stays on the
dense bf16 weights.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from inference.models.activation_quant import quantized_activations
from inference.models.gguf_blocks import (
    GROUP,
    SUPER_BLOCK,
    BlockMatrix,
    KQuantBlocks,
    Q8Blocks,
    check_blocks,
    same_type,
    stack_blocks,
)
from inference.models.native import load_library

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class DecodeWeight:
    """One matrix's blocks in the kernel's layout (Q4_0/Q4_1 or Q8_0)."""

    levels: torch.Tensor  # [out, in // 2] uint8: each Q4 block's 16 bytes as ggml stores them; Q8_0: int8
    dm: torch.Tensor  # [out, in // 32 * 2] float16: (d, m) per block, W = d * q + m (m = 0 for Q8_0)

    @property
    def out_features(self) -> int:
        return int(self.levels.shape[0])

    def nbytes(self) -> int:
        return self.levels.numel() + self.dm.numel() * self.dm.element_size()


@dataclass(slots=True)
class KQuantWeight:
    """One matrix of Q4_K/Q5_K/Q6_K/IQ4_XS super-blocks, each row the file's bytes."""

    raw: torch.Tensor  # [out, in // 256 * bytes per super-block] uint8
    type_id: int  # ggml's number for the type

    @property
    def out_features(self) -> int:
        return int(self.raw.shape[0])

    def nbytes(self) -> int:
        return self.raw.numel()


BlockWeight = DecodeWeight | KQuantWeight
# The kquant_linear op's numbers for KQUANT_ACTIVATIONS.
KQUANT_ACTIVATIONS_OP = {"bf16": 0, "int8": 1, "int16": 2}
MAX_INPUT = 32768  # the kernels widen one row's scales into a fixed L1 buffer (kMaxDm)


def decode_weights(shards: Sequence[BlockMatrix]) -> list[BlockWeight]:
    """A projection's shards in the kernels' layouts, each run of one type stacked into one matrix (a Q4_K_M
    file's fused QKV mixes Q4_K with Q6_K, for one)."""
    runs: list[list[BlockMatrix]] = []
    for shard in shards:
        if runs and same_type(runs[-1][-1], shard):
            runs[-1].append(shard)
        else:
            runs.append([shard])
    return [decode_weight(stack_blocks(run)) for run in runs]


def decode_weight(blocks: BlockMatrix) -> BlockWeight:
    """The kernel takes a Q4 file's nibbles as they are; only the (d, m) pairs are interleaved, in the file's
    own fp16 (`eligible` has checked they fit it exactly). K-quant rows go as they are."""
    if isinstance(blocks, KQuantBlocks):
        return KQuantWeight(torch.from_numpy(np.ascontiguousarray(blocks.raw)), blocks.type_id)
    out_features = blocks.shape[0]
    if isinstance(blocks, Q8Blocks):
        levels = blocks.levels
        dm = np.stack([blocks.scale, np.zeros_like(blocks.scale)], axis=-1).astype(np.float16)
    else:
        levels = blocks.nibbles
        dm = np.stack([blocks.scale, blocks.minimum], axis=-1).astype(np.float16)
    return DecodeWeight(
        torch.from_numpy(np.ascontiguousarray(levels)),
        torch.from_numpy(np.ascontiguousarray(dm.reshape(out_features, -1))),
    )


def eligible(blocks: BlockMatrix) -> bool:
    """The kernel takes block pairs (the input size a multiple of 64) with fp16 scales and minimums, as GGUF
    files store them: 20 bytes per Q4 block, the file's own stream. K-quants come in whole super-blocks."""
    if blocks.shape[1] > MAX_INPUT:
        return False
    if isinstance(blocks, KQuantBlocks):
        return blocks.shape[1] % SUPER_BLOCK == 0
    if blocks.shape[1] % (2 * GROUP):
        return False
    pairs = [blocks.scale] if isinstance(blocks, Q8Blocks) else [blocks.scale, blocks.minimum]
    return all(np.array_equal(v.astype(np.float16).astype(v.dtype), v) for v in pairs)


@dataclass(frozen=True, slots=True)
class Q4Kernel:
    """The loaded kernel, with AMX tiles allowed or not for every call made through this handle."""

    amx: bool  # bf16 decoding rows on tiles at every row count (q4_amx); the integer paths take tiles anyway
    max_rows: int  # 16 on either path
    activations: str = "bf16"  # K-quant decoding rows: one of KQUANT_ACTIVATIONS

    def linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor:
        """x [..., in] bf16 with at most max_rows rows (decoding) -> [..., out] bf16."""
        # The integer paths' tiles (from kIntegerTileRows rows, on AMX-INT8) give the registers' bits, so
        # K-quant rows may take them whatever q4_amx says; Q4/Q8_0 rows follow q4_amx.
        integer = isinstance(weight, KQuantWeight) and self.activations != "bf16"
        return _linear(x, weight, bias, amx=self.amx or integer, batch=False, activations=self.activations)

    def batch_linear(self, x: torch.Tensor, weight: BlockWeight, bias: torch.Tensor | None) -> torch.Tensor:
        """Any number of rows (prompt chunks, large batches) -> [..., out] bf16: AMX tiles wherever the CPU
        has them, whatever `amx` says (every prompt row takes one path), else registers."""
        return _linear(x, weight, bias, amx=True, batch=True, activations="bf16")


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
        out = torch.ops.mooncake_q4.kquant_linear(
            flat, weight.raw, weight.type_id, bias, amx, batch, KQUANT_ACTIVATIONS_OP[activations]
        )
    else:
        out = torch.ops.mooncake_q4.q4_linear(flat, weight.levels, weight.dm, bias, amx, batch)
    return out.view(*x.shape[:-1], out.shape[-1])


_lock = threading.Lock()
_checked: dict[tuple[bool, str], Q4Kernel | None] = {}  # per (amx, activations): the kernel, or None


def load_kernel(
    cache_dir: Path, *, amx: bool = True, activations: str = "bf16", compiler: str = "c++"
) -> Q4Kernel | None:
    """The kernel, built into `cache_dir` if needed, loaded and checked once per process and AMX setting;
    None (and a log line) wherever it cannot or must not run here."""
    # Imported here: kernel_build is also `python -m`'s entry point, which must not find it imported yet.
    from inference.models import kernel_build

    if not kernel_build.cpu_supported():
        logger.info("Q4 decode kernel off: this CPU lacks AVX512-BF16")
        return None
    with _lock:
        try:
            load_library(cache_dir, compiler=compiler)
            if (amx, activations) not in _checked:
                kernel = Q4Kernel(amx, int(torch.ops.mooncake_q4.max_rows(amx)), activations)
                _checked[amx, activations] = kernel if _agrees_with_dense(kernel) else None
            return _checked[amx, activations]
        except (RuntimeError, OSError, ImportError, AttributeError) as exc:
            logger.warning("Q4 decode kernel unavailable (%s); small batches use the dense bf16 weights", exc)
            return None


def _agrees_with_dense(kernel: Q4Kernel) -> bool:
    """One-hot rows read single weights exactly, random rows match an fp32 product closely and a row alone
    gets the bits it gets among others, on the register path and (where there is AMX) the tile path."""
    checked = check_blocks()
    return all(_agrees(kernel, b) for b in checked)


def _agrees(kernel: Q4Kernel, blocks: BlockMatrix) -> bool:
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


def _agrees_integer(kernel: Q4Kernel, weight: KQuantWeight, blocks: BlockMatrix) -> bool:
    """Each row within one bf16 rounding of the quantized activations' product, and alike alone or not
    and on either path."""
    dense = torch.from_numpy(blocks.dequantize()).double()
    x = torch.randn(kernel.max_rows, blocks.shape[1], generator=torch.Generator().manual_seed(0)).bfloat16()
    out = kernel.linear(x, weight, None)
    exact = quantized_activations(x, kernel.activations).double() @ dense.T
    close = bool(torch.all((out.double() - exact).abs() <= exact.abs() * 2**-8 + 1e-5))
    alike = torch.equal(kernel.linear(x[-1:], weight, None), out[-1:])
    if torch.ops.mooncake_q4.integer_tiles_available():  # the tiles must give the registers' bits
        op, width = torch.ops.mooncake_q4.kquant_integer_linear, KQUANT_ACTIVATIONS_OP[kernel.activations]
        alike = alike and torch.equal(*(op(x, weight.raw, weight.type_id, width, t) for t in (True, False)))
    if not (close and alike):
        logger.warning("GGUF %s decode kernel disagrees with the dense weights", kernel.activations)
        return False
    return True
