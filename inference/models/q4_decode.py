"""Small decode batches through a GGUF's Q4 blocks on CPU, with the bf16 model's own weights.

A decode step of a few sequences is bound by reading every weight once. For a GGUF's Q4_0/Q4_1
projections the kernel (csrc/q4_decode.cpp) reads the 4-bit levels plus a (d, m) pair per block, 5 bytes
per 8 weights against bf16's 16, and expands each block in registers to bf16(d * q + m): exactly the bf16
weights the dequantized model holds. `matches` checks that bit for bit before a projection takes the path,
so this changes speed, not weights; only the fp32 accumulation order differs from oneDNN's packed product.
Batches of up to 16 rows take it where the CPU has AMX (4 with AVX512-BF16 alone); larger ones, prefill
among them, stay on oneDNN's packed bf16 weights.

The kernel is compiled on first use with the machine's C++ compiler against torch's headers (about 15 s,
then cached under the model cache's kernels/). Without AVX512-BF16 or a compiler, or with
MOONCAKE_Q4_DECODE=0, every batch stays on the packed bf16 path.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from inference.models.int4 import GROUP, Q4Blocks

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("csrc") / "q4_decode.cpp"
_FLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mamx-tile", "-mamx-bf16"]


@dataclass(frozen=True, slots=True)
class Q8Blocks:
    """A GGUF's Q8_0 matrix (a tied head's embedding, typically): W = levels * scale per block of 32."""

    levels: np.ndarray  # [out, in] int8
    scale: np.ndarray  # [out, in // 32] float32

    def dequantize(self) -> np.ndarray:
        """The exact weights, in float32 (int8 times an fp16 scale is exact)."""
        return self.levels.astype(np.float32) * np.repeat(self.scale, GROUP, axis=1)


@dataclass(slots=True)
class DecodeWeight:
    """One matrix's blocks in the kernel's layout (Q4_0/Q4_1 or Q8_0)."""

    levels: torch.Tensor  # [out, in // 2] uint8: each Q4 block's 16 bytes as ggml stores them; Q8_0: int8
    dm: torch.Tensor  # [out, in // 32 * 2] float32: (d, m) per block, W = d * q + m (m = 0 for Q8_0)

    def nbytes(self) -> int:
        return self.levels.numel() + self.dm.numel() * self.dm.element_size()


def decode_weight(blocks: Q4Blocks | Q8Blocks) -> DecodeWeight:
    out_features, in_features = blocks.levels.shape
    if isinstance(blocks, Q8Blocks):
        levels = blocks.levels
        dm = np.stack([blocks.scale, np.zeros_like(blocks.scale)], axis=-1).astype(np.float32)
    else:
        grouped = blocks.levels.reshape(out_features, -1, GROUP)
        nibbles = grouped[..., : GROUP // 2] | (grouped[..., GROUP // 2 :] << 4)  # ggml: low nibbles first
        levels = nibbles.reshape(out_features, in_features // 2)
        dm = np.stack([blocks.scale, blocks.minimum], axis=-1).astype(np.float32)
    return DecodeWeight(
        torch.from_numpy(np.ascontiguousarray(levels)),
        torch.from_numpy(np.ascontiguousarray(dm.reshape(out_features, -1))),
    )


def eligible(blocks: Q4Blocks | Q8Blocks) -> bool:
    """The kernel takes block pairs: the input size must be a multiple of 64."""
    return blocks.levels.shape[1] % (2 * GROUP) == 0


def matches(blocks: Q4Blocks | Q8Blocks, dense: torch.Tensor) -> bool:
    """Whether the kernel's weights, bf16(d * q + m), are bit for bit the model's bf16 weight."""
    if dense.dtype != torch.bfloat16 or tuple(dense.shape) != blocks.levels.shape:
        return False
    expected = torch.from_numpy(blocks.dequantize()).to(torch.bfloat16)
    return torch.equal(expected, dense)


def q4_linear(x: torch.Tensor, weight: DecodeWeight, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] bf16 with at most max_rows() rows -> [..., out] bf16."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.ops.mooncake_q4.q4_linear(flat, weight.levels, weight.dm, bias)
    return out.view(*x.shape[:-1], out.shape[-1])


@functools.cache
def max_rows() -> int:
    """The largest batch the loaded kernel takes: 16 where it may use AMX tiles, else 4 (above that,
    oneDNN's packed bf16 GEMM is as fast or faster; bench/NOTES.md, session 4)."""
    return int(torch.ops.mooncake_q4.max_rows())


@functools.cache
def kernel_available() -> bool:
    """Compile and load the kernel once; False (and a log line) wherever it cannot run here."""
    if os.environ.get("MOONCAKE_Q4_DECODE", "1") == "0":
        return False
    if not _cpu_supported():
        logger.info("Q4 decode kernel off: this CPU lacks AVX512-BF16")
        return False
    try:
        _build()
        return _agrees_with_dense()
    except (RuntimeError, OSError, ImportError, AttributeError) as exc:
        logger.warning("Q4 decode kernel unavailable (%s); small batches use the packed bf16 path", exc)
        return False


def _cpu_supported() -> bool:
    try:
        return bool(torch.cpu._is_avx512_bf16_supported()) and torch.backends.cpu.get_cpu_capability() in (
            "AVX512",
            "AMX",
        )
    except AttributeError:
        return False


def _build() -> None:
    """Compile the kernel into the model cache (once per source, flags and torch) and load its op."""
    from torch.utils import cpp_extension

    from inference.loader import default_cache_dir

    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        raise OSError("no C++ compiler (c++ or $CXX) on PATH")
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join(_FLAGS).encode() + torch.__version__.encode()).hexdigest()[:16]
    library = default_cache_dir() / "kernels" / f"q4_decode-{key}.so"
    if not library.exists():
        library.parent.mkdir(parents=True, exist_ok=True)
        partial = library.with_suffix(f".{os.getpid()}.tmp")
        torch_lib = Path(torch.__file__).parent / "lib"
        command = [
            compiler,
            *_FLAGS,
            "-shared",
            "-fPIC",
            "-std=c++17",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            *(f"-I{path}" for path in cpp_extension.include_paths()),
            str(_SOURCE),
            "-o",
            str(partial),
            f"-L{torch_lib}",
            f"-Wl,-rpath,{torch_lib}",
            "-lc10",
            "-ltorch_cpu",
        ]
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise OSError(f"compiling {_SOURCE.name} failed: {result.stderr.strip()[-500:]}")
        partial.replace(library)  # atomic: concurrent builds (test workers, servers) never see half a file
        logger.info("Compiled the Q4 decode kernel in %.1fs", time.monotonic() - started)
    torch.ops.load_library(str(library))


def _agrees_with_dense() -> bool:
    """One-hot rows read single weights exactly, and random rows match an fp32 product closely, on both
    the register path and (where there is AMX) the tile path."""
    rng = np.random.default_rng(0)
    blocks = Q4Blocks(
        rng.integers(0, 16, (20, 128), dtype=np.uint8),
        rng.uniform(0.001, 0.02, (20, 4)).astype(np.float16).astype(np.float32),
        rng.normal(0, 0.05, (20, 4)).astype(np.float16).astype(np.float32),
    )
    q8 = Q8Blocks(
        rng.integers(-128, 128, (20, 128), dtype=np.int8),
        rng.uniform(0.001, 0.02, (20, 4)).astype(np.float16).astype(np.float32),
    )
    return all(_agrees(b) for b in (blocks, q8))


def _agrees(blocks: Q4Blocks | Q8Blocks) -> bool:
    weight = decode_weight(blocks)
    dense = torch.from_numpy(blocks.dequantize()).bfloat16()
    gen = torch.Generator().manual_seed(0)
    for rows in sorted({1, 2, 3, max_rows()}):
        columns = torch.randperm(128, generator=gen)[:rows]
        one_hot = torch.zeros(rows, 128, dtype=torch.bfloat16)
        one_hot[torch.arange(rows), columns] = 1
        x = torch.randn(rows, 128, generator=gen).bfloat16()
        expected = x.float() @ dense.float().T
        exact = torch.equal(q4_linear(one_hot, weight, None), dense[:, columns].T)
        close = torch.allclose(q4_linear(x, weight, None).float(), expected, rtol=1e-2, atol=1e-2)
        if not (exact and close):
            logger.warning("Q4 decode kernel disagrees with the dense weights at %d rows; not using it", rows)
            return False
    return True
