"""The weight plan: one decision, from the kernels' checks, the settings and the file, that the load, the
memory plan and the console's label all take."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import inference.models.quantization.amx_tiles as amx_tiles
from inference import EngineConfig
from inference.config_groups import CpuKernelConfig
from inference.manager.footprint import estimate, probe_device, read_shape
from inference.manager.native_path import native_path
from inference.models.kernels.build import cpu_supported
from inference.models.kernels.library import forget_checks
from inference.models.loader.load import load_model
from inference.models.loader.source import default_gguf_path
from inference.models.quantization.gguf.method import GGUFDecodeMethod
from inference.models.quantization.plan import (
    GGUF_BLOCKS,
    INT4_TYPES,
    KQUANT_TYPES,
    CpuFacts,
    plan_weights,
)

AVX512 = CpuFacts(auto_dtype="bfloat16", avx512_blocks=True, onednn_packing=True)
AMX = CpuFacts(auto_dtype="bfloat16", avx512_blocks=True, amx_tiles=True, onednn_packing=True)
AVX2 = CpuFacts(auto_dtype="float32", avx2_blocks=True)
Q4_FILE = frozenset({"Q4_1", "Q8_0", "F32"})
KQUANT_FILE = frozenset({"Q4_K", "Q6_K", "F32"})


def plan(cpu: CpuFacts, files: frozenset[str] | None = Q4_FILE, dtype: str = "auto", **settings: object):  # type: ignore[no-untyped-def]
    quantization = str(settings.pop("quantization", "none"))
    return plan_weights(
        cpu=cpu, dtype=dtype, quantization=quantization, kernels=CpuKernelConfig(**settings), file_types=files
    )


def test_bf16_blocks_keep_a_dense_copy_only_where_amx_tiles_are_missing() -> None:
    assert plan(AVX512).blocks == "avx512" and plan(AVX512).dense_copy and not plan(AVX512).tiles
    assert plan(AMX).blocks == "avx512" and not plan(AMX).dense_copy and plan(AMX).tiles
    assert plan(AMX, gguf_dense_copy=True).dense_copy and not plan(AVX512, gguf_dense_copy=False).dense_copy
    assert plan(AMX).label == GGUF_BLOCKS
    assert (
        plan(AMX, gguf_kernels=False).blocks is None and plan(AMX, gguf_kernels=False).label == "bf16 dense"
    )
    assert plan(AMX, files=None).blocks is None  # a safetensors folder


def test_fp32_reads_blocks_only_when_its_dtype_is_auto_and_the_file_has_k_quants() -> None:
    assert plan(AVX2, KQUANT_FILE).blocks == "avx2"
    assert plan(AVX2, KQUANT_FILE).embedding_lookup and not plan(AVX2, KQUANT_FILE).dense_copy
    assert plan(AVX2, KQUANT_FILE, dtype="float32").blocks is None  # float32 by name: exact fp32
    assert plan(AVX2, Q4_FILE).blocks is None  # the bundled model stays dense unless asked
    assert plan(AVX2, Q4_FILE, gguf_dense_copy=False).blocks == "avx2"
    assert plan(AVX2, KQUANT_FILE, gguf_dense_copy=True).label == "fp32 dense"


def test_int4_and_gpus() -> None:
    assert plan(AMX, quantization="int4").int4 and plan(AMX, quantization="int4").label == GGUF_BLOCKS
    assert not plan(AMX, KQUANT_FILE, quantization="int4").int4  # no Q4_0/Q4_1 to keep
    gpu = plan(CpuFacts(kind="cuda", auto_dtype="bfloat16"))
    assert gpu.blocks is None and gpu.label.startswith("GPU kernels")


def test_one_table_of_block_types() -> None:
    from inference.models.quantization.gguf.formats import KQUANT_BYTES

    assert tuple(KQUANT_BYTES) == KQUANT_TYPES and set(INT4_TYPES) <= {"Q4_0", "Q4_1"}


@pytest.mark.skipif(
    not cpu_supported(), reason="the bf16 block path needs AVX512-BF16 (the AVX2 plan is above)"
)
def test_an_amx_cpu_whose_tile_check_fails_is_planned_and_loaded_alike(
    monkeypatch: pytest.MonkeyPatch, test_cache_dir: Path
) -> None:
    """The memory plan, the console's label and the load all see the failed check: the dense bf16 copy is
    planned and kept (before, the plan took `not amx` from the CPU flags while the load took the check)."""
    monkeypatch.setattr(amx_tiles, "cpu_has_amx", lambda: True)
    monkeypatch.setattr(amx_tiles, "_tiles_agree", lambda: False)
    forget_checks()
    try:
        config = EngineConfig(device="cpu", dtype="auto", cache_dir=str(test_cache_dir))
        device = probe_device("cpu", config.cpu_kernels())
        assert not device.amx and device.block_kernels
        shape = read_shape(default_gguf_path())
        planned = estimate("m", "m", config, shape, device).weights_bytes
        assert planned == shape.num_params * 2 + shape.block_bytes  # blocks beside the dense copy
        assert native_path(default_gguf_path(), config, device).weights == GGUF_BLOCKS
        loaded = load_model("default", device="cpu", cache_dir=test_cache_dir)
        methods = [m.method for m in loaded.model.modules() if hasattr(m, "method")]
        decode = [m for m in methods if isinstance(m, GGUFDecodeMethod)]
        assert decode and all(m.fallback is not None for m in decode)
        assert loaded.dtype == torch.bfloat16
        held = loaded.model.weight_bytes()
        # A tied head packed for oneDNN holds its own copy beside the embedding's table (not in the plan).
        embedding = loaded.model.model.embed_tokens.weight
        tied = embedding.numel() * 2 if loaded.model.lm_head is None and device.packing else 0
        assert abs(planned + tied - held) <= 0.02 * held, (planned, tied, held)
    finally:
        forget_checks()


def test_old_setting_names_still_work() -> None:
    config = EngineConfig.from_dict({"q4_decode": False, "q4_amx": True, "quantization": "gguf"})
    assert (config.gguf_kernels, config.gguf_amx_decode, config.quantization) == (False, True, "int4")
    assert EngineConfig(quantization="gguf").quantization == "int4"
    kernels = EngineConfig.from_dict({"gguf_kernels": "off", "kquant_activations": "int8"}).cpu_kernels()
    assert kernels == CpuKernelConfig(gguf_kernels=False, kquant_activations="int8")
    with pytest.raises(ValueError, match="kquant_activations"):
        EngineConfig(kquant_activations="int4")
