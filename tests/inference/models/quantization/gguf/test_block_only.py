"""A GGUF model without a dense copy never holds its block-read projections dense, even while loading."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inference.models.kernels import build as kernel_build
from inference.models.layers.linear import Linear
from inference.models.loader.load import LoadedModel, load_model
from inference.models.quantization.gguf import block_only as block_loading
from inference.models.quantization.gguf.formats import BlockMatrix
from inference.models.quantization.gguf.match import dequantized_bf16
from inference.models.quantization.gguf.method import GGUFBlocksMethod, GGUFDecodeMethod
from tests.inference.all_logits import IDS, logits
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


def test_a_load_from_blocks_writes_no_dequantized_copy_of_the_file(
    tiny_model_dir: Callable[[str], Path],
    test_cache_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every projection read as stored: the rest of the weights come straight from the GGUF, and the cache
    holds only its config and tokenizer; a later load that wants dense projections adds the dequantized
    checkpoint beside them, and both loads compute the same logits."""
    cache = tmp_path / "cache"  # its own, to see what a load writes there
    shutil.copytree(test_cache_dir / "kernels", cache / "kernels")
    path = tmp_path / "experts-q8.gguf"
    write_moe_gguf(tiny_model_dir("qwen3-moe"), path, "qwen3moe", experts_type="Q8_0")
    blocks = load_model(str(path), dtype="bfloat16", device="cpu", cache_dir=cache, gguf_dense_copy=False)
    experts = [m for n, m in blocks.model.named_modules() if isinstance(m, Linear) and ".experts." in n]
    assert experts and all(isinstance(m.method, GGUFBlocksMethod) for m in experts)
    assert (blocks.model_dir / "config.json").is_file() and not list(cache.rglob("*.safetensors"))
    assert "do not expand" not in caplog.text

    dense = load_model(str(path), dtype="bfloat16", device="cpu", cache_dir=cache, gguf_dense_copy=True)
    assert dense.model_dir == blocks.model_dir and (dense.model_dir / "model.safetensors").is_file()
    # bf16 products of the same weights, summed in another order by each path
    torch.testing.assert_close(logits(blocks, IDS), logits(dense, IDS), atol=0.05, rtol=0.02)
