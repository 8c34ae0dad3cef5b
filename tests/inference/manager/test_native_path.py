"""inference.manager.native_path: whether a model runs natively and how its weights are computed, decided
from tiny files written here (a config.json, GGUFs written with gguf-py), the EngineConfig and the device."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

import inference.models.registry
from inference import EngineConfig
from inference.manager.footprint import DeviceFacts
from inference.manager.native_path import native_path
from inference.models.quantization.plan import GGUF_BLOCKS, GPU_KERNELS
from tests.inference.arch_files import CPU_BF16, gguf_file, hf_dir

ROOT = Path(__file__).resolve().parents[3]
CPU_PLAIN = DeviceFacts("cpu", 64 << 30, 32 << 30, 4)  # no native bf16: "auto" is fp32, no block kernels
CPU_AVX2 = DeviceFacts("cpu", 64 << 30, 32 << 30, 4, avx2_blocks=True)  # "auto" is fp32, read as blocks
GPU = DeviceFacts("cuda", 80 << 30, 80 << 30, 2)


def test_a_supported_hf_folder_runs_natively_in_its_dtype(tmp_path: Path) -> None:
    folder = hf_dir(tmp_path / "llama", "LlamaForCausalLM")
    path = native_path(folder, EngineConfig(), CPU_PLAIN)
    assert (path.native, path.architecture, path.weights) == (True, "LlamaForCausalLM", "fp32 dense")
    assert path.label == "native: LlamaForCausalLM, fp32 dense"
    assert native_path(folder, EngineConfig(), CPU_BF16).weights == "bf16 dense"  # no GGUF: no blocks
    assert native_path(folder, EngineConfig(dtype="float16"), CPU_BF16).weights == "fp16 dense"
    assert native_path(folder, EngineConfig(), GPU).label == f"native: LlamaForCausalLM, {GPU_KERNELS}"
    assert native_path(folder, EngineConfig(), None).label == "native: LlamaForCausalLM"  # device not probed


def test_an_unsupported_architecture_is_not_native_and_the_registry_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = hf_dir(tmp_path / "neox", "GPTNeoXForCausalLM")
    path = native_path(folder, EngineConfig(), CPU_BF16)
    assert (path.native, path.architecture, path.weights) == (False, "GPTNeoXForCausalLM", None)
    assert (
        path.label == "not native: our engine does not run GPTNeoXForCausalLM (engine type transformers does)"
    )
    # The list is the registry's, read at each call: an architecture added there runs natively at once.
    grown = (*inference.models.registry.SUPPORTED_ARCHITECTURES, "GPTNeoXForCausalLM")
    monkeypatch.setattr(inference.models.registry, "SUPPORTED_ARCHITECTURES", grown)
    assert native_path(folder, EngineConfig(), CPU_BF16).native is True


@pytest.mark.parametrize(
    ("kind", "config", "device", "weights"),
    [
        (GGMLQuantizationType.Q4_0, EngineConfig(), CPU_BF16, GGUF_BLOCKS),
        (GGMLQuantizationType.Q8_0, EngineConfig(), CPU_BF16, GGUF_BLOCKS),
        (GGMLQuantizationType.Q4_0, EngineConfig(gguf_kernels=False), CPU_BF16, "bf16 dense"),
        (GGMLQuantizationType.Q4_0, EngineConfig(dtype="float32"), CPU_BF16, "fp32 dense"),
        (GGMLQuantizationType.Q4_0, EngineConfig(), CPU_PLAIN, "fp32 dense"),  # no block kernels here
        (GGMLQuantizationType.Q4_0, EngineConfig(gguf_dense_copy=False), CPU_AVX2, GGUF_BLOCKS),
        (GGMLQuantizationType.Q4_0, EngineConfig(), CPU_AVX2, GGUF_BLOCKS),  # without K-quants too
        (GGMLQuantizationType.Q4_0, EngineConfig(gguf_dense_copy=True), CPU_AVX2, "fp32 dense"),
        (GGMLQuantizationType.Q8_0, EngineConfig(dtype="float32"), CPU_AVX2, "fp32 dense"),  # exact, by name
        (
            GGMLQuantizationType.Q4_0,
            EngineConfig(gguf_kernels=False, gguf_dense_copy=False),
            CPU_AVX2,
            "fp32 dense",
        ),
        (
            GGMLQuantizationType.Q4_0,
            EngineConfig(quantization="gguf", dtype="bfloat16"),
            CPU_PLAIN,
            GGUF_BLOCKS,
        ),
        (
            GGMLQuantizationType.Q8_0,
            EngineConfig(quantization="gguf", dtype="bfloat16"),
            CPU_PLAIN,
            "bf16 dense",
        ),
        (None, EngineConfig(), CPU_BF16, "bf16 dense"),  # an F16 GGUF has no blocks to read
        (GGMLQuantizationType.Q4_0, EngineConfig(), GPU, GPU_KERNELS),
    ],
)
def test_a_gguf_reads_its_blocks_as_stored_where_the_load_would(
    tmp_path: Path,
    kind: GGMLQuantizationType | None,
    config: EngineConfig,
    device: DeviceFacts,
    weights: str,
) -> None:
    path = native_path(gguf_file(tmp_path / "m.gguf", kind=kind), config, device)
    assert (path.native, path.architecture, path.weights) == (True, "LlamaForCausalLM", weights)


def test_a_gguf_architecture_the_converter_does_not_map_is_not_native(tmp_path: Path) -> None:
    path = native_path(gguf_file(tmp_path / "g.gguf", arch="gptneox"), EngineConfig(), CPU_BF16)
    assert (path.native, path.architecture) == (False, "gptneox")
    assert path.label == "not native: our engine does not run GGUF architecture gptneox"


def test_files_that_cannot_be_read_leave_the_architecture_unknown(tmp_path: Path) -> None:
    garbage = tmp_path / "broken.gguf"
    garbage.write_bytes(b"not a gguf at all")
    path = native_path(garbage, EngineConfig(), CPU_BF16)
    assert (path.native, path.architecture, path.weights) == (None, None, None)
    assert (
        path.label
        == "native engine; architecture unknown (cannot read broken.gguf: broken.gguf is not a GGUF file)"
    )
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    assert native_path(folder, EngineConfig(), CPU_BF16).label.endswith(
        "(config.json names no architectures)"
    )
    missing = native_path(None, EngineConfig(), CPU_BF16)
    assert (missing.native, missing.label) == (
        None,
        "native engine; architecture unknown (its files are not here)",
    )


def test_other_engine_types_are_not_native(tmp_path: Path) -> None:
    folder = hf_dir(tmp_path / "llama", "LlamaForCausalLM")
    served = native_path(folder, EngineConfig(engine_type="vllm", expert_parallel=True), None)
    assert (served.native, served.label) == (
        False,
        "not native: engine type vllm (vLLM's own server runs it)",
    )
    upstream = native_path(folder, EngineConfig(engine_type="openai", base_url="http://h:1/v1"), None)
    assert upstream.label == "not native: engine type openai (the upstream server runs it)"
    batching = native_path(folder, EngineConfig(engine_type="transformers"), CPU_BF16)
    assert (batching.native, batching.architecture) == (False, "LlamaForCausalLM")
    assert batching.label == (
        "not native: engine type transformers; LlamaForCausalLM runs natively with engine type native"
    )


def test_importing_it_loads_no_torch() -> None:
    code = "import sys, inference.manager.native_path; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0
