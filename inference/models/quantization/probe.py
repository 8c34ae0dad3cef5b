"""The facts the weight plan (plan.py) is decided from, found by running each CPU kernel's own check once
per process: the load and the memory plan ask this one function, so they plan alike even where a check
fails (an AMX CPU whose tile check fails keeps its dense bf16 copy in both). `cpu_isa` caps what may be
used, so a smaller CPU's path can be forced and measured on a larger one."""

from __future__ import annotations

import logging
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

logger = logging.getLogger(__name__)


def kernel_cache(kernels: CpuKernelConfig) -> Path:
    return Path(kernels.cache_dir) if kernels.cache_dir else DEFAULT_CACHE_DIR


def probe_cpu(kernels: CpuKernelConfig) -> CpuFacts:
    """This CPU's facts under `kernels`' settings: a kernel counts only where it built, loaded and passed
    its check here (each is done once per process; a kernel the settings leave out is never built)."""
    import torch

    isa = kernels.cpu_isa
    # Looked up on their modules at each call: a test may stand in for another CPU kind.
    bf16 = device.fast_bf16_cpu() and isa != "avx2"
    cache, compiler = kernel_cache(kernels), kernels.kernel_compiler
    packing = bf16 and packing_supported(torch.bfloat16)
    native = kernels.gguf_kernels and isa != "none"
    avx512 = avx2 = False
    if native and bf16 and build.cpu_supported():
        handle = load_kernel(
            cache,
            amx=kernels.gguf_amx_decode,
            activations=kernels.kquant_activations,
            compiler=compiler,
            tiles=isa == "auto",
        )
        avx512 = handle is not None
    elif native and not bf16 and build.avx2_supported():
        avx2 = load_avx2_kernel(cache, activations=kernels.kquant_activations, compiler=compiler) is not None
    return CpuFacts(
        kind="cpu",
        auto_dtype="bfloat16" if bf16 else "float32",
        avx512_blocks=avx512,
        amx_tiles=packing and isa == "auto" and load_tiles(cache, compiler=compiler),
        avx2_blocks=avx2,
        onednn_packing=packing,
    )
