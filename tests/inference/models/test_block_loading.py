"""A GGUF model without a dense copy never holds its block-read projections dense, even while loading."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from inference.models import block_loading, gguf_convert, kernel_build
from inference.models.gguf_blocks import BlockMatrix
from inference.models.layers import Linear
from inference.models.linear_method import GGUFBlocksMethod, GGUFDecodeMethod
from inference.models.loader import LoadedModel, load_model
from inference.models.q4_decode import dequantized_bf16
from tests.inference.gguf_files import write_moe_gguf

pytestmark = pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the block kernels need AVX512-BF16")


def bundled_bf16(cache: Path, *, dense_copy: bool) -> LoadedModel:
    return load_model("default", dtype="bfloat16", device="cpu", cache_dir=cache, gguf_dense_copy=dense_copy)


def test_the_projections_are_loaded_as_blocks_alone_and_decode_as_with_the_dense_copy(
    test_cache_dir: Path,
) -> None:
    one_copy = bundled_bf16(test_cache_dir, dense_copy=False)
    two_copies = bundled_bf16(test_cache_dir, dense_copy=True)
    linears = [m for m in one_copy.model.modules() if isinstance(m, Linear)]
    assert len(linears) == 30 * 4
    assert all(isinstance(m.method, GGUFBlocksMethod) and m.weight.numel() == 0 for m in linears)
    others = [m.method for m in two_copies.model.modules() if isinstance(m, Linear)]
    others.append(two_copies.model.tied_head)  # the Q8_0 embedding's head keeps a packed copy too
    assert all(isinstance(m, GGUFDecodeMethod) and m.fallback is not None for m in others)
    copies = sum(m.fallback.nbytes() for m in others if isinstance(m, GGUFDecodeMethod) and m.fallback)
    assert one_copy.model.weight_bytes() == two_copies.model.weight_bytes() - copies
    x = torch.randn(3, 576).bfloat16()  # decoding rows: the same blocks through the same kernel
    one = one_copy.model.model.layers[0].self_attn.qkv_proj(x)
    assert torch.equal(one, two_copies.model.model.layers[0].self_attn.qkv_proj(x))


def test_blocks_that_disagree_with_the_checkpoint_load_again_with_the_dense_copy(
    test_cache_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The loader samples each block-read tensor against the converted checkpoint; a mismatch (a kernel bug)
    is logged and the model loads with its dense copy instead of serving other weights."""

    def off_by_one_step(blocks: BlockMatrix) -> torch.Tensor:
        expanded = dequantized_bf16(blocks)
        expanded.view(torch.int16)[-1, 0] += 1  # the last row: a sampled one
        return expanded

    monkeypatch.setattr(block_loading, "dequantized_bf16", off_by_one_step)
    loaded = bundled_bf16(test_cache_dir, dense_copy=False)
    methods = [m.method for m in loaded.model.modules() if isinstance(m, Linear)]
    assert all(isinstance(m, GGUFDecodeMethod) and m.fallback is not None for m in methods)
    assert "do not expand to the checkpoint's weights" in caplog.text


def test_a_large_models_fp16_checkpoint_still_loads_its_blocks_alone(
    tiny_model_dir: Callable[[str], Path],
    test_cache_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Above FP32_MAX_ELEMENTS (every 7B+ file) the converted checkpoint is fp16, and rounding twice (fp32 ->
    fp16 -> bf16) differs from the kernels' one rounding in some weights: that is not a disagreement of the
    blocks (it read as one, and such files reloaded with a dense copy)."""
    monkeypatch.setattr(gguf_convert, "FP32_MAX_ELEMENTS", 0)
    cache = tmp_path / "cache"  # its own: the fp16 conversion must not take the shared cache's place
    shutil.copytree(test_cache_dir / "kernels", cache / "kernels")
    path = tmp_path / "experts-q8.gguf"
    write_moe_gguf(tiny_model_dir("qwen3-moe"), path, "qwen3moe", experts_type="Q8_0")
    loaded = load_model(str(path), dtype="bfloat16", device="cpu", cache_dir=cache, gguf_dense_copy=False)
    with safe_open(str(loaded.model_dir / "model.safetensors"), framework="pt") as f:
        assert f.get_slice("model.layers.0.mlp.experts.0.gate_proj.weight").get_dtype() == "F16"
    assert "do not expand" not in caplog.text
    experts = [m for n, m in loaded.model.named_modules() if isinstance(m, Linear) and ".experts." in n]
    assert experts and all(isinstance(m.method, GGUFBlocksMethod) for m in experts)
