"""Mixture-of-experts GGUFs (experts stacked per layer in 3-D tensors, as llama.cpp writes them): converted to
the same logits as the checkpoint they were written from, and, quantized, their experts read as stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
import torch

from inference import EngineConfig
from inference.manager.footprint import DeviceFacts, estimate, read_shape
from inference.models.architectures.moe import MoEDecoderForCausalLM
from inference.models.kernels import build as kernel_build
from inference.models.layers.linear import Linear
from inference.models.loader.load import load_model
from inference.models.quantization.gguf.method import GGUFBlocksMethod
from tests.inference.all_logits import IDS, logits
from tests.inference.gguf_files import write_moe_gguf

CASES = [
    ("mixtral", "llama", "MixtralForCausalLM"),
    ("qwen2-moe-all-sparse", "qwen2moe", "Qwen2MoeForCausalLM"),
    ("qwen3-moe", "qwen3moe", "Qwen3MoeForCausalLM"),
    ("olmoe", "olmoe", "OlmoeForCausalLM"),  # a config transformers' GGUF reader does not make: ours
]


@pytest.mark.parametrize(("name", "arch", "expected"), CASES)
def test_an_f32_moe_gguf_loads_to_its_checkpoints_logits(
    tiny_model_dir: Callable[[str], Path], tmp_path: Path, name: str, arch: str, expected: str
) -> None:
    folder = tiny_model_dir(name)
    gguf_path = tmp_path / f"{name}.gguf"
    write_moe_gguf(folder, gguf_path, arch)
    from_gguf = load_model(str(gguf_path), dtype="float32", device="cpu", cache_dir=tmp_path / "cache")
    assert from_gguf.architecture == expected
    ours = logits(from_gguf, IDS)
    reference = logits(load_model(str(folder), dtype="float32", device="cpu"), IDS)
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)


@pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the block kernels need AVX512-BF16")
@pytest.mark.parametrize(("name", "arch", "expected"), CASES[:3])
def test_q8_0_experts_are_read_as_stored(
    tiny_model_dir: Callable[[str], Path],
    test_cache_dir: Path,
    tmp_path: Path,
    name: str,
    arch: str,
    expected: str,
) -> None:
    """bf16 on CPU: every expert projection multiplies through its file blocks (no dense copy of them),
    and the logits stay within bf16 rounding of the same model's dense bf16 path over the same weights
    (the blocks expand bit for bit to that model's weights; only the kernels' order of summation differs)."""
    gguf_path = tmp_path / f"{name}-q8.gguf"
    write_moe_gguf(tiny_model_dir(name), gguf_path, arch, experts_type="Q8_0")
    cache = test_cache_dir  # the compiled kernels are shared; the converted file is keyed by its content
    blocks = load_model(
        str(gguf_path), dtype="bfloat16", device="cpu", cache_dir=cache, gguf_dense_copy=False
    )
    experts = {
        module_name: module.method
        for module_name, module in blocks.model.named_modules()
        if isinstance(module, Linear) and ".experts." in module_name
    }
    assert len(experts) == 2 * 4 * 2  # layers x experts x (gate_up, down)
    assert all(isinstance(method, GGUFBlocksMethod) for method in experts.values()), experts
    assert all(module.weight.numel() == 0 for n, module in blocks.model.named_modules() if n in experts)
    # The memory plan counts the experts as the blocks they stay: what the loaded model holds, within the
    # tile padding of its dense bf16 projections. (Not the tied model: the plan leaves out the packed copy
    # of an F32 embedding that a tied head multiplies with, which dwarfs this tiny model's experts.)
    shape = read_shape(gguf_path)
    model = cast(MoEDecoderForCausalLM, blocks.model)
    config = model.moe
    assert shape.block_params == 2 * config.num_experts * 3 * 64 * config.expert_intermediate
    if model.lm_head is not None:
        facts = DeviceFacts("cpu", 64 << 30, 32 << 30, 2, block_kernels=True, amx=True)
        planned = estimate("m", "m", EngineConfig(dtype="bfloat16", device="cpu"), shape, facts).weights_bytes
        held = model.weight_bytes()
        assert abs(planned - held) <= 0.05 * held, (planned, held)
    ours = logits(blocks, IDS)
    dense = load_model(str(gguf_path), dtype="bfloat16", device="cpu", cache_dir=cache, gguf_kernels=False)
    assert not any(
        isinstance(m.method, GGUFBlocksMethod) for m in dense.model.modules() if isinstance(m, Linear)
    )
    reference = logits(dense, IDS)
    scale = reference.abs().max().item()
    assert (ours - reference).abs().max().item() <= 0.01 * scale  # measured: 0, 0 and 0.008
