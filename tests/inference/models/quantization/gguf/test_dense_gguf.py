"""Gemma 2, Gemma 3 and Phi-3 GGUFs as llama.cpp's converter writes them (Gemma's norms stored as 1 + w and
its extra norms, Phi-3's fused projections and LongRoPE factor tensors): converted to the same logits as the
checkpoint they were written from, and, quantized, their projections read as stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
import torch

from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.gguf.architectures import architecture
from inference.models.gguf.reader import GGUFFile
from inference.models.kernels import build as kernel_build
from inference.models.layers.linear import Linear
from inference.models.loader.load import load_model
from inference.models.quantization.gguf.method import GGUFBlocksMethod
from tests.inference import conftest
from tests.inference.all_logits import IDS, logits
from tests.inference.gguf_files import write_dense_gguf

# A GGUF has no key for Gemma's attention scale or its local/global layer pattern: llama.cpp derives both
# (1/sqrt(head_dim); Gemma 2 alternates from a local layer, Gemma 3 has five local layers per global one).
# These are the tiny checkpoints with those settings; everything else (soft caps, windows, per-layer-type
# rope, Gemma 3's untied head, Phi-3's LongRoPE) is as in TINY_CONFIGS.
LLAMA_CPP_SHAPED: dict[str, dict[str, object]] = {
    "gemma2": {"query_pre_attn_scalar": 16},
    "gemma3": {"query_pre_attn_scalar": 16, "num_hidden_layers": 6, "layer_types": None},
    "phi3-longrope": {},
}
CASES = [
    ("gemma2", "gemma2", "Gemma2ForCausalLM"),
    ("gemma3", "gemma3", "Gemma3ForCausalLM"),
    ("phi3-longrope", "phi3", "Phi3ForCausalLM"),
]


@pytest.fixture(scope="module")
def checkpoint(
    tiny_model_dir: Callable[[str], Path],
    default_model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], Path]:
    built: dict[str, Path] = {}

    def make(name: str) -> Path:
        if not LLAMA_CPP_SHAPED[name]:
            return tiny_model_dir(name)
        if name not in built:
            shaped = f"{name}-llama-cpp"
            with pytest.MonkeyPatch.context() as patch:
                options = {**conftest.TINY_CONFIGS[name], **LLAMA_CPP_SHAPED[name]}
                patch.setitem(conftest.TINY_CONFIGS, shaped, options)
                folder = tmp_path_factory.mktemp(shaped)
                built[name] = conftest.build_tiny_model_dir(shaped, folder, default_model_dir)
        return built[name]

    return make


@pytest.mark.parametrize(("name", "arch", "expected"), CASES)
def test_an_f32_gguf_loads_to_its_checkpoints_logits(
    checkpoint: Callable[[str], Path], tmp_path: Path, name: str, arch: str, expected: str
) -> None:
    folder = checkpoint(name)
    gguf_path = tmp_path / f"{name}.gguf"
    write_dense_gguf(folder, gguf_path, arch)
    from_gguf = load_model(str(gguf_path), dtype="float32", device="cpu", cache_dir=tmp_path / "cache")
    assert from_gguf.architecture == expected
    ours = logits(from_gguf, IDS)
    reference = logits(load_model(str(folder), dtype="float32", device="cpu"), IDS)
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)


@pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the block kernels need AVX512-BF16")
@pytest.mark.parametrize(("name", "arch", "expected"), CASES)
def test_q8_0_projections_are_read_as_stored(
    checkpoint: Callable[[str], Path],
    test_cache_dir: Path,
    tmp_path: Path,
    name: str,
    arch: str,
    expected: str,
) -> None:
    """bf16 on CPU: every projection (Phi-3's fused ones cut into their shards and stacked back) multiplies
    through its file blocks, within bf16 rounding of the dense bf16 path over the same weights."""
    gguf_path = tmp_path / f"{name}-q8.gguf"
    write_dense_gguf(checkpoint(name), gguf_path, arch, projections_type="Q8_0")
    cache = test_cache_dir
    blocks = load_model(
        str(gguf_path), dtype="bfloat16", device="cpu", cache_dir=cache, gguf_dense_copy=False
    )
    assert blocks.architecture == expected
    projections = {
        module_name: module
        for module_name, module in blocks.model.named_modules()
        if isinstance(module, Linear) and module_name != "lm_head"
    }
    layers = len(cast(DecoderForCausalLM, blocks.model).decoder_layers())
    assert len(projections) == 4 * layers  # qkv, o, gate_up, down per layer
    assert all(isinstance(m.method, GGUFBlocksMethod) for m in projections.values()), projections
    assert all(module.weight.numel() == 0 for module in projections.values())
    ours = logits(blocks, IDS)
    dense = load_model(str(gguf_path), dtype="bfloat16", device="cpu", cache_dir=cache, gguf_kernels=False)
    assert not any(
        isinstance(m.method, GGUFBlocksMethod) for m in dense.model.modules() if isinstance(m, Linear)
    )
    reference = logits(dense, IDS)
    scale = reference.abs().max().item()
    # Within 2% of the largest logit: without AMX the blocks' batch path sums in registers in its own fp32
    # order, and Gemma 2's four bf16 roundings per layer add up (1.8% measured on an AVX512 EPYC).
    assert (ours - reference).abs().max().item() <= 0.02 * scale


class _Metadata:
    """The metadata half of a GGUF file, for settings llama.cpp derives rather than reads."""

    def __init__(self, architecture: str, fields: dict[str, object]) -> None:
        self.architecture, self.fields = architecture, fields

    def field(self, key: str, default: object = None) -> object:
        return self.fields.get(key, default)


def test_gemma_27b_scale_and_layer_patterns_follow_llama_cpp() -> None:
    from transformers import Gemma2Config, Gemma3TextConfig

    # Gemma 3 27B (62 layers): the scale from hidden / heads (168), not head_dim; 5 local layers per global.
    big = Gemma3TextConfig(num_hidden_layers=62, hidden_size=5376, num_attention_heads=32, head_dim=128)
    meta = _Metadata("gemma3", {"gemma3.attention.key_length": 128, "gemma3.attention.sliding_window": 1024})
    config = architecture(meta.architecture).config(cast(GGUFFile, meta), big)
    assert config.query_pre_attn_scalar == 168
    assert [kind == "full_attention" for kind in config.layer_types[:12]] == [False] * 5 + [True] + [
        False
    ] * 5 + [True]
    assert (
        config.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
    )  # llama.cpp's fixed local base
    # Gemma 2 below 27B: head_dim; an explicit pattern in the file wins over the alternation.
    small = Gemma2Config(num_hidden_layers=4, hidden_size=3584, num_attention_heads=16, head_dim=256)
    pattern = [True, True, False, True]
    meta = _Metadata(
        "gemma2",
        {
            "gemma2.attention.key_length": 256,
            "gemma2.attention.sliding_window": 4096,
            "gemma2.attention.sliding_window_pattern": pattern,
        },
    )
    config = architecture(meta.architecture).config(cast(GGUFFile, meta), small)
    assert config.query_pre_attn_scalar == 256
    assert config.layer_types == ["sliding_attention"] * 2 + ["full_attention", "sliding_attention"]
