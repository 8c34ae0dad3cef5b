"""How a model being loaded gets its linears' methods: the plan (from its device, dtype, config and file),
the GGUF's blocks read once, and the methods given once the weights are in (linear_method.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PretrainedConfig

from inference.models.avx2_blocks import Avx2Kernel, load_avx2_kernel
from inference.models.decoder import DecoderForCausalLM
from inference.models.gguf_blocks import KQUANT_BYTES, GGUFBlocks, read_blocks
from inference.models.gguf_file import GGUFFile
from inference.models.int4 import int4_supported
from inference.models.linear_method import BlockKernel, LinearPlan
from inference.models.onednn import packing_supported
from inference.models.q4_decode import Q4Kernel, load_kernel
from inference.models.tile_linear import load_tiles

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LinearSetup:
    plan: LinearPlan
    blocks: GGUFBlocks | None  # the file's blocks, where the plan reads any


def plan_linears(
    path: Path,
    hf_config: PretrainedConfig,
    device: torch.device,
    dtype: torch.dtype,
    *,
    cache: Path | None,
    kernel_cache: Path,
    quantization: str,
    q4_decode: bool,
    q4_amx: bool,
    kquant_activations: str,
    gguf_dense_copy: bool | None,
    compiler: str,
    auto_dtype: bool = False,
) -> LinearSetup:
    """`cache` is set for a GGUF source (its conversion cache); the kernels are built into `kernel_cache`.
    `auto_dtype`: the dtype was left to "auto", so an fp32 CPU model may read its blocks (avx2_blocks.py)."""
    if quantization == "gguf":
        _check_gguf_int4(path, device, dtype)
    kernel: BlockKernel | None = None
    bf16_cpu = device.type == "cpu" and dtype == torch.bfloat16
    fp32_cpu = device.type == "cpu" and dtype == torch.float32 and auto_dtype
    if cache is not None and q4_decode and quantization != "gguf" and bf16_cpu:
        kernel = load_kernel(cache, amx=q4_amx, activations=kquant_activations, compiler=compiler)
    elif (
        cache is not None
        and q4_decode
        and quantization != "gguf"
        and fp32_cpu
        and _fp32_blocks(path, gguf_dense_copy)
    ):
        kernel = load_avx2_kernel(kernel_cache, activations=kquant_activations, compiler=compiler)
    pack = device.type == "cpu" and packing_supported(dtype)
    tiles = pack and load_tiles(kernel_cache, compiler=compiler)
    # Without AMX tiles the blocks' batch path runs in registers, far slower than oneDNN's dense kernels;
    # an fp32 model's dense copy would be four bytes a weight, slower than the blocks at every batch size.
    copy = gguf_dense_copy if gguf_dense_copy is not None else bf16_cpu and not tiles
    # fp32 embeddings are 4 bytes a weight: as large as the whole file for a 1B model (block_embedding.py).
    lookups = isinstance(kernel, Avx2Kernel) and not copy
    plan = LinearPlan(
        pack=pack,
        tiles=tiles,
        int4=quantization == "gguf",
        kernel=kernel,
        dense_copy=copy,
        embedding_blocks=lookups,
    )
    blocks = None
    if path.is_file() and (plan.int4 or kernel is not None):
        heads, kv_heads = hf_config.num_attention_heads, hf_config.num_key_value_heads
        blocks = read_blocks(path, num_heads=heads, num_kv_heads=kv_heads)
    return LinearSetup(plan, blocks)


def _fp32_blocks(path: Path, gguf_dense_copy: bool | None) -> bool:
    """Whether an fp32 model on an AVX2 CPU reads the file's blocks. A dense copy asked for is the fp32 model
    itself; a Q4_0/Q4_1/Q8_0-only file (the bundled model) stays dense unless gguf_dense_copy is false, its
    prompts being faster on oneDNN's fp32 GEMM (bench/NOTES session 26). Read from the header alone."""
    if gguf_dense_copy is not None:
        return not gguf_dense_copy
    return path.is_file() and any(t.type_name in KQUANT_BYTES for t in GGUFFile(path).tensors)


def use_linear_methods(model: DecoderForCausalLM, setup: LinearSetup, path: Path) -> None:
    """One LinearMethod per layer, from the plan and the file's blocks."""
    plan = setup.plan
    counts = model.use_linear_methods(plan, setup.blocks)
    if plan.int4 and counts["int4"] == 0:
        raise ValueError(f"{path.name} has no Q4_0 or Q4_1 projections to keep 4-bit")
    rows = ""
    if isinstance(plan.kernel, Q4Kernel):
        rows = f"; gguf-decode up to {plan.kernel.max_rows} rows"
    logger.info("Linear methods: %s%s", ", ".join(f"{n} {name}" for name, n in sorted(counts.items())), rows)


def _check_gguf_int4(path: Path, device: torch.device, dtype: torch.dtype) -> None:
    if not path.is_file():
        raise ValueError("quantization='gguf' needs a .gguf model file")
    if device.type != "cpu" or dtype != torch.bfloat16 or not int4_supported():
        raise ValueError(
            "quantization='gguf' runs on CPU in bfloat16 (dtype auto on an AMX/AVX512-BF16 CPU, or bfloat16)"
        )
