"""The CPU default KV budget's rule (torch-free arithmetic) and the KV cache dtype's resolution."""

from __future__ import annotations

import pytest

from inference.models.layers.kv_budget import (
    DEFAULT_CPU_KV_BYTES,
    WORKING_SHARE_TOKENS,
    cpu_kv_budget,
    default_kv_tokens,
    resolve_kv_dtype,
)

# The bundled SmolLM2-135M: 30 layers x 3 KV heads x head_dim 64, K and V.
SMOL_FP32 = 2 * 30 * 3 * 64 * 4
RAM = 16 << 30  # a laptop


def budget(per_token: int = SMOL_FP32, *, length: int = 8192, seqs: int = 64, ram: int = RAM) -> int:
    return cpu_kv_budget(
        None, bytes_per_token=per_token, max_model_len=length, max_num_seqs=seqs, block_size=16, ram_bytes=ram
    ).bytes


def test_one_full_context_plus_a_working_share_per_other_sequence() -> None:
    assert WORKING_SHARE_TOKENS == 64
    assert default_kv_tokens(max_model_len=8192, max_num_seqs=64, block_size=16) == 8192 + 63 * 64
    # The bundled model's default: 12224 tokens, 537 MiB in fp32 and half that in a 16-bit cache, where
    # the fixed default held 2 GiB whatever the model.
    assert budget() == 12224 * SMOL_FP32 == 563_281_920
    assert budget(SMOL_FP32 // 2) == 281_640_960


def test_one_sequence_gets_exactly_one_context_and_short_contexts_share_whole_lengths() -> None:
    assert default_kv_tokens(max_model_len=8192, max_num_seqs=1, block_size=16) == 8192
    # A context shorter than the share: every sequence can hold a full one (never more than that).
    assert default_kv_tokens(max_model_len=40, max_num_seqs=4, block_size=16) == 160
    # Rounded up to whole blocks, as the runner allocates them.
    assert default_kv_tokens(max_model_len=100, max_num_seqs=1, block_size=16) == 112


def test_the_ceiling_and_the_ram_fraction_bound_it() -> None:
    # A long-context model never gets more than the old fixed default did.
    long_context = cpu_kv_budget(
        None, bytes_per_token=131072, max_model_len=131072, max_num_seqs=64, block_size=16, ram_bytes=64 << 30
    )
    assert long_context.bytes == DEFAULT_CPU_KV_BYTES
    assert "cut to the 2048.0 MiB ceiling" in long_context.source
    small_ram = budget(ram=1 << 30)
    assert small_ram == (1 << 30) // 4


def test_the_source_states_the_rule() -> None:
    source = cpu_kv_budget(
        None, bytes_per_token=SMOL_FP32, max_model_len=8192, max_num_seqs=64, block_size=16, ram_bytes=RAM
    ).source
    assert source == "CPU default kv_cache_memory_bytes=563281920 (8192 + (64 - 1) x 64 = 12224 tokens)"


def test_an_explicit_budget_wins_and_must_be_positive() -> None:
    explicit = cpu_kv_budget(
        2 << 30, bytes_per_token=SMOL_FP32, max_model_len=8192, max_num_seqs=64, block_size=16
    )
    assert explicit.bytes == 2 << 30 and explicit.source == f"kv_cache_memory_bytes={2 << 30}"
    with pytest.raises(ValueError, match="must be positive"):
        cpu_kv_budget(0, bytes_per_token=SMOL_FP32, max_model_len=8192, max_num_seqs=64, block_size=16)


def test_kv_dtype_auto_is_the_compute_dtype_but_fp16_where_auto_chose_fp32_on_a_cpu() -> None:
    def kv(setting: str, compute: str, dtype: str = "auto", device: str = "cpu") -> str:
        return resolve_kv_dtype(setting, compute, dtype_setting=dtype, device_type=device)

    assert kv("auto", "float32") == "float16"  # a CPU without native bf16: llama.cpp's default cache
    assert kv("auto", "float32", dtype="float32") == "float32"  # asked for fp32: exact against fp32
    assert kv("auto", "bfloat16") == "bfloat16"
    assert kv("auto", "float32", device="cuda") == "float32"  # GPU backends read the queries' dtype
    assert kv("auto", "float16", device="cuda") == "float16"
    assert kv("float16", "float32") == kv("float16", "float32", dtype="float32") == "float16"
    assert kv("float32", "float32") == "float32"
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, float32, bfloat16, float16"):
        kv("fp8", "float32")
