"""The weight plan: one decision, from the kernels' checks, the settings and the file, that the load, the
memory plan and the console's label all take."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

import inference.models.quantization.amx_tiles as amx_tiles
from inference import EngineConfig, device
from inference.config_groups import CpuKernelConfig
from inference.manager.footprint import estimate, probe_device, read_shape
from inference.manager.native_path import native_path
from inference.models.kernels import build
from inference.models.kernels.build import avx2_supported, cpu_supported
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
from inference.models.quantization.probe import probe_cpu
from inference.models.quantization.setup import plan_linears

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


def test_fp32_reads_blocks_when_its_dtype_is_auto_unless_the_dense_copy_is_asked_for() -> None:
    assert plan(AVX2, KQUANT_FILE).blocks == "avx2"
    assert plan(AVX2, KQUANT_FILE).embedding_lookup and not plan(AVX2, KQUANT_FILE).dense_copy
    assert plan(AVX2, KQUANT_FILE, dtype="float32").blocks is None  # float32 by name: exact fp32
    assert plan(AVX2, Q4_FILE).blocks == "avx2"  # the bundled model too (issue 45)
    assert plan(AVX2, Q4_FILE).embedding_lookup and not plan(AVX2, Q4_FILE).dense_copy
    assert plan(AVX2, Q4_FILE, gguf_dense_copy=True).blocks is None
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


def test_cpu_isa_is_checked_where_it_is_set() -> None:
    with pytest.raises(ValueError, match="cpu_isa"):
        EngineConfig(cpu_isa="neon")
    with pytest.raises(ValueError, match="gguf_amx_decode needs AMX tiles"):
        EngineConfig(cpu_isa="avx512", gguf_amx_decode=True)
    assert EngineConfig.from_dict({"cpu_isa": "avx2"}).cpu_kernels().cpu_isa == "avx2"


@pytest.mark.skipif(not (cpu_supported() and avx2_supported()), reason="needs a CPU with AVX512-BF16")
def test_a_smaller_cpus_path_can_be_forced(test_cache_dir: Path) -> None:
    """cpu_isa caps what the probe offers the plan: the AVX2 path (fp32, its own kernels) and the path of an
    AVX-512 CPU without AMX run on a larger CPU, to be measured there."""
    avx2 = probe_cpu(CpuKernelConfig(cache_dir=str(test_cache_dir), cpu_isa="avx2"))
    assert (avx2.auto_dtype, avx2.avx2_blocks, avx2.avx512_blocks, avx2.amx_tiles) == (
        "float32",
        True,
        False,
        False,
    )
    assert avx2.path == "AVX2, fp32"
    avx512 = probe_cpu(CpuKernelConfig(cache_dir=str(test_cache_dir), cpu_isa="avx512"))
    assert avx512.avx512_blocks and not avx512.amx_tiles and avx512.path == "AVX512-BF16 without AMX tiles"
    none = probe_cpu(CpuKernelConfig(cache_dir=str(test_cache_dir), cpu_isa="none"))
    assert not (none.avx512_blocks or none.avx2_blocks or none.amx_tiles)
    assert none.path == "no native kernels (bf16 through torch)"
    forced = plan_weights(
        cpu=avx2,
        dtype="auto",
        quantization="none",
        kernels=CpuKernelConfig(cpu_isa="avx2"),
        file_types=KQUANT_FILE,
    )
    assert forced.blocks == "avx2" and forced.dtype == "float32"


def test_a_cpu_without_native_kernels_runs_dense_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, test_cache_dir: Path
) -> None:
    """What an ARM CPU (or an x86 one without AVX2) gets: dense fp32 through torch, named at load."""
    monkeypatch.setattr(device, "fast_bf16_cpu", lambda: False)
    monkeypatch.setattr(build, "cpu_supported", lambda: False)
    monkeypatch.setattr(build, "avx2_supported", lambda: False)
    kernels = CpuKernelConfig(cache_dir=str(test_cache_dir))
    facts = probe_cpu(kernels)
    assert facts == CpuFacts(auto_dtype="float32") and facts.path == "no native kernels (fp32 through torch)"
    with caplog.at_level(logging.INFO, logger="inference.models.quantization.setup"):
        setup = plan_linears(
            default_gguf_path(),
            device=torch.device("cpu"),
            dtype="auto",
            quantization="none",
            kernels=kernels,
            num_heads=9,
            num_kv_heads=3,
        )
    assert setup.weights.label == "fp32 dense" and setup.plan.kernel is None and setup.blocks is None
    assert "CPU path: no native kernels (fp32 through torch); weights: fp32 dense" in caplog.text
