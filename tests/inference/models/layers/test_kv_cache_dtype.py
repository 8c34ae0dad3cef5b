"""A KV cache stored in bf16 or f16 under an fp32 model: stored in that dtype, read back upcast, and the
logits within stated bounds of an fp32 cache's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inference.core.model_runner import ModelRunner
from inference.models.loader.load import LoadedModel, load_model
from tests.inference.models.architectures.test_models import BLOCK, run_schedule

# Relative to the largest fp32 logit: each K and V element is rounded once, to 8 significant bits (bf16)
# or 11 (f16); through the model that moved logits by at most ~2^-7 and ~2^-10 of their scale here.
BOUNDS = {"bfloat16": 2**-5, "float16": 2**-8}
A = list(range(3, 51))  # 48 tokens: a prompt in two chunks (the second reads the first from the cache)
B = list(range(60, 90))  # 30 tokens: a whole prompt, then decode rows beside A's
STEPS = [{"a": 20, "b": 24}, {"a": 20}, *[{"a": 1, "b": 1}] * 6, {"a": 1}, {"a": 1}]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Callable[[str], Path]) -> LoadedModel:
    return load_model(str(tiny_model_dir("llama-rope-llama3")), dtype="float32", device="cpu")


def runner(loaded: LoadedModel, kv_cache_dtype: str, dtype_setting: str | None = None) -> ModelRunner:
    return ModelRunner(
        loaded,
        dtype_setting=dtype_setting,
        block_size=BLOCK,
        max_num_seqs=4,
        max_num_batched_tokens=256,
        max_model_len=None,
        kv_cache_memory_bytes=1 << 20,
        gpu_memory_utilization=0.9,
        kv_cache_dtype=kv_cache_dtype,
    )


def logits(loaded: LoadedModel, kv_cache_dtype: str) -> torch.Tensor:
    rows = run_schedule(runner(loaded, kv_cache_dtype), {"a": A, "b": B}, STEPS)
    return torch.cat([rows["a"], rows["b"]])


def test_auto_keeps_the_compute_dtype_and_a_choice_is_what_the_cache_stores(tiny: LoadedModel) -> None:
    fp32 = runner(tiny, "auto")  # as loaded in fp32 on purpose (dtype float32): an exact cache
    assert fp32.kv_dtype == torch.float32
    assert runner(tiny, "auto", dtype_setting="float32").kv_dtype == torch.float32
    # dtype "auto" that chose fp32 on a CPU (no native bf16): the fp16 cache llama.cpp keeps by default.
    assert runner(tiny, "auto", dtype_setting="auto").kv_dtype == torch.float16
    half = runner(tiny, "float16")
    k_cache = next(iter(half.model.decoder_layers())).self_attn.attn.k_cache
    assert half.kv_dtype == torch.float16 and k_cache.dtype == torch.float16
    # Half the bytes per block: twice the blocks in the same budget.
    assert half.num_blocks == 2 * fp32.num_blocks


@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "float16"])
def test_a_16_bit_cache_keeps_logits_within_its_bound_of_an_fp32_cache(
    tiny: LoadedModel, kv_cache_dtype: str
) -> None:
    reference = logits(tiny, "float32")
    ours = logits(tiny, kv_cache_dtype)
    gap = (ours - reference).abs().max().item()
    scale = reference.abs().max().item()
    assert 0 < gap <= BOUNDS[kv_cache_dtype] * scale, f"{gap:.2e} against logits up to {scale:.2f}"


def test_a_fresh_prompt_attends_to_its_keys_as_the_cache_rounds_them(tiny: LoadedModel) -> None:
    """A prompt computed whole and the same prompt whose first chunk was found cached see the same keys:
    the answer does not depend on whether its prefix was a cache hit."""
    whole = run_schedule(runner(tiny, "bfloat16"), {"a": A}, [{"a": 48}])["a"]
    chunked = run_schedule(runner(tiny, "bfloat16"), {"a": A}, [{"a": 32}, {"a": 16}])["a"]
    torch.testing.assert_close(whole[32:], chunked[32:], atol=1e-4, rtol=0)
