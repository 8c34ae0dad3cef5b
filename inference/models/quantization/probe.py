"""The facts the weight plan (plan.py) is decided from, found by running each CPU kernel's own check once
per process: the load and the memory plan ask this one function, so they plan alike even where a check
fails (an AMX CPU whose tile check fails keeps its dense bf16 copy in both)."""

from __future__ import annotations

from pathlib import Path

from inference import device
from inference.cache_dir import DEFAULT_CACHE_DIR
from inference.config_groups import CpuKernelConfig
from inference.models.kernels import build
from inference.models.quantization.amx_tiles import load_tiles
from inference.models.quantization.gguf.avx2 import load_avx2_kernel
from inference.models.quantization.gguf.avx512 import load_kernel
from inference.models.quantization.onednn import packing_supported
from inference.models.quantization.plan import CpuFacts


def kernel_cache(kernels: CpuKernelConfig) -> Path:
    return Path(kernels.cache_dir) if kernels.cache_dir else DEFAULT_CACHE_DIR


def probe_cpu(kernels: CpuKernelConfig) -> CpuFacts:
    """This CPU's facts under `kernels`' settings: a kernel counts only where it built, loaded and passed
    its check here (each is done once per process; a kernel switched off by the settings is never built)."""
    import torch

    # Looked up on their modules at each call: a test may stand in for another CPU kind.
    bf16 = device.fast_bf16_cpu()
    cache, compiler = kernel_cache(kernels), kernels.kernel_compiler
    packing = packing_supported(torch.bfloat16)
    avx512 = avx2 = False
    if kernels.gguf_kernels and bf16 and build.cpu_supported():
        avx512 = (
            load_kernel(
                cache,
                amx=kernels.gguf_amx_decode,
                activations=kernels.kquant_activations,
                compiler=compiler,
            )
            is not None
        )
    elif kernels.gguf_kernels and not bf16 and build.avx2_supported():
        avx2 = load_avx2_kernel(cache, activations=kernels.kquant_activations, compiler=compiler) is not None
    return CpuFacts(
        kind="cpu",
        auto_dtype="bfloat16" if bf16 else "float32",
        avx512_blocks=avx512,
        amx_tiles=packing and load_tiles(cache, compiler=compiler),
        avx2_blocks=avx2,
        onednn_packing=packing,
    )
