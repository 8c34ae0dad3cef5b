"""The memory a model is planned with, read from its file's headers: a GGUF on a bf16 CPU holds the blocks
its kernels read, and its projections' dense bf16 copy only where it keeps one."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from inference import EngineConfig
from inference.config_groups import CpuKernelConfig
from inference.manager.footprint import BLOCK_TYPES, DeviceFacts, estimate, probe_device, read_shape
from inference.models.gguf.reader import GGUFFile
from inference.models.loader.load import load_model
from inference.models.loader.source import default_gguf_path
from inference.models.quantization.gguf.avx512 import load_kernel
from inference.models.quantization.gguf.formats import KQUANT_BYTES
from inference.models.quantization.plan import KQUANT_TYPES


def cpu(*, block_kernels: bool = False, amx: bool = False) -> DeviceFacts:
    return DeviceFacts("cpu", 64 << 30, 32 << 30, 2, block_kernels=block_kernels, amx=amx)


def weights(device: DeviceFacts, **config: object) -> int:
    shape = read_shape(default_gguf_path())
    config = {"dtype": "bfloat16", **config}
    return estimate("m", "m", EngineConfig(device="cpu", **config), shape, device).weights_bytes  # type: ignore[arg-type]


def test_the_block_types_are_the_ones_the_loader_reads() -> None:
    assert set(BLOCK_TYPES) == {"Q4_0", "Q4_1", "Q8_0", *KQUANT_BYTES}


def test_the_bundled_gguf_is_planned_as_its_blocks_plus_its_bf16_embedding() -> None:
    shape = read_shape(default_gguf_path())
    tensors = {t.name: t for t in GGUFFile(default_gguf_path()).tensors}
    embedding = tensors["token_embd.weight"]
    # 30 layers of Q4_1 projections, and the Q8_0 embedding as the tied head's blocks.
    assert shape.block_params == shape.num_params - embedding.n_elements - sum(
        t.n_elements for t in tensors.values() if t.type_name == "F32"
    )
    one_copy = weights(cpu(block_kernels=True, amx=True))
    assert one_copy == (shape.num_params - shape.block_params) * 2 + shape.block_bytes
    assert one_copy < shape.file_bytes + embedding.n_elements * 2 + (1 << 20)
    with_copy = weights(cpu(block_kernels=True, amx=True), gguf_dense_copy=True)
    assert with_copy == shape.num_params * 2 + shape.block_bytes
    no_amx = weights(cpu(block_kernels=True))
    assert no_amx == with_copy  # without AMX the dense copy is kept by default
    no_kernels = weights(cpu())
    assert no_kernels == shape.num_params * 2


def test_an_fp32_cpu_without_avx512_bf16_plans_the_blocks_when_its_dtype_is_auto() -> None:
    """dtype auto is fp32 there, and the projections and the embedding keep only their blocks
    (quantization/gguf/avx2.py, quantization/gguf/embedding.py); float32 by name, or a dense copy asked for,
    holds four bytes per weight."""
    shape = read_shape(default_gguf_path())
    avx2 = DeviceFacts("cpu", 64 << 30, 32 << 30, 4, avx2_blocks=True)
    # The bundled model's Q8_0 embedding is its tied head's: its blocks are looked up, not held again.
    assert shape.lookup_params > 0 and shape.lookup_bytes == 0
    held = shape.block_params + shape.lookup_params
    # Q4_1 and Q8_0 only, without K-quants: the blocks by default too (issue 45)
    assert shape.file_types is not None and not shape.file_types & set(KQUANT_TYPES)
    blocks = (shape.num_params - held) * 4 + shape.block_bytes
    assert weights(avx2, dtype="auto") == weights(avx2, dtype="auto", gguf_dense_copy=False) == blocks
    assert weights(avx2, dtype="float32") == shape.num_params * 4
    assert weights(avx2, dtype="auto", gguf_dense_copy=True) == shape.num_params * 4
    assert weights(avx2, dtype="auto", gguf_kernels=False, gguf_dense_copy=False) == shape.num_params * 4
    assert weights(DeviceFacts("cpu", 64 << 30, 32 << 30, 4), dtype="auto") == shape.num_params * 4


@pytest.mark.slow
def test_the_plan_matches_what_the_loaded_model_holds(test_cache_dir: Path) -> None:
    """The estimate for this machine against the weights the loader really keeps (within 2%: the Q8_0
    head's fp16 scale pairs and the tile padding are not in the file): bf16 with the AVX512 kernels, or
    fp32 with the AVX2 ones."""
    device = probe_device("cpu", CpuKernelConfig(cache_dir=str(test_cache_dir)))
    settings: dict[str, object] = {}
    if device.avx2_blocks:  # fp32 on its blocks: the default there
        settings = {"dtype": "auto"}
    elif device.block_kernels and load_kernel(test_cache_dir) is not None:
        settings = {"dtype": "bfloat16", "gguf_dense_copy": False}  # blocks only, with or without AMX
    else:
        pytest.skip("this CPU runs neither block kernel: the plan is the dense model's")
    loaded = load_model("default", device="cpu", cache_dir=test_cache_dir, **settings)  # type: ignore[arg-type]
    held = loaded.model.weight_bytes()
    planned = weights(device, **settings)
    assert planned < read_shape(default_gguf_path()).num_params * 2
    assert abs(planned - held) <= 0.02 * held, (planned, held)
    assert psutil.Process().memory_info().rss > held


def test_the_kv_cache_is_planned_by_the_engines_rule_in_its_dtype() -> None:
    """The plan sizes the CPU default KV cache with kv_budget's function, as the runner does, and says so."""
    from inference.manager.memory_plan import describe

    shape = read_shape(default_gguf_path())
    fp32_cpu = DeviceFacts("cpu", 16 << 30, 8 << 30, 4)  # a laptop without AVX512-BF16: dtype auto is fp32
    per_token_fp32 = 2 * 30 * 3 * 64 * 4
    exact = estimate("m", "model", EngineConfig(device="cpu", dtype="float32"), shape, fp32_cpu)
    assert exact.kv_bytes_per_token == per_token_fp32 and exact.kv_dtype == "float32"
    assert exact.kv_bytes == (8192 + 63 * 64) * per_token_fp32  # 537 MiB, where 2 GiB was the old default
    assert exact.kv_extra_tokens == 63 * 64 and exact.kv_sequences == 1
    assert "(8192 + (64 - 1) x 64 = 12224 tokens)" in describe(exact)
    # dtype auto chose fp32 here (no native bf16): the cache is fp16 by default, as the runner keeps it.
    plain = estimate("m", "model", EngineConfig(device="cpu"), shape, fp32_cpu)
    assert plain.kv_dtype == "float16" and plain.kv_bytes_per_token == per_token_fp32 // 2
    assert plain.kv_bytes == exact.kv_bytes // 2  # 269 MiB
    half = estimate(
        "m", "model", EngineConfig(device="cpu", dtype="float32", kv_cache_dtype="float16"), shape, fp32_cpu
    )
    assert half.kv_bytes_per_token == per_token_fp32 // 2 and half.kv_bytes == exact.kv_bytes // 2
    fixed = estimate("m", "model", EngineConfig(device="cpu", kv_cache_memory_bytes=1 << 30), shape, fp32_cpu)
    assert fixed.kv_bytes == 1 << 30 and fixed.kv_sequences == 0
    assert "kv_cache_memory_bytes=1073741824" in describe(fixed)
