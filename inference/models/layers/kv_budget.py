"""How many bytes the paged KV cache may take, in which dtype, and the errors that say so. Torch-free: the
memory plan (inference/manager/footprint.py) sizes caches with the same functions before any load.

The CPU default (no kv_cache_memory_bytes) is sized to the model, its context and its concurrency:

    tokens = max_model_len + (max_num_seqs - 1) x min(WORKING_SHARE_TOKENS, max_model_len)

one full-length sequence, so the longest request the server accepts can always finish alone, plus a working
share for each other sequence that may run beside it. It sits between llama.cpp, whose slots share one n_ctx
(-np 16 -c 8192 holds 8192 tokens in all), and Ollama, which holds num_ctx for each of num_parallel. When
the running sequences outgrow it, the scheduler preempts the newest and recomputes it later (as vLLM does),
so a short cache costs throughput, never a wrong answer. Then it is bounded: by DEFAULT_CPU_KV_BYTES (what
the old fixed default was; a long-context model never gets more than it did) and by a fraction of the RAM,
which the web app and other models share. Either bound may cut it below one full context: max_model_len then
resolves to what the cache holds, and an explicit max_model_len over that is refused with the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.config_groups import check_kv_cache_dtype

DEFAULT_CPU_KV_BYTES = 2 << 30  # the old fixed CPU default: now only a ceiling on the rule's size
DEFAULT_CPU_RAM_FRACTION = 0.25
# Tokens each sequence beyond the first is sized for: a chat turn's reply plus a short prompt. With the
# default max_num_seqs 64 that is 4032 tokens beside one 8192-token context (the bundled model: 12224).
WORKING_SHARE_TOKENS = 64

KV_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True, slots=True)
class KVBudget:
    """How many bytes the KV cache may take, and how to say so (and how to get more) in errors."""

    bytes: int
    source: str  # e.g. "kv_cache_memory_bytes=1073741824" or "gpu_memory_utilization=0.90 of 80.0 GiB"
    total_device_bytes: int = 0  # CUDA only: lets errors name the utilization that would fit
    other_usage_bytes: int = 0  # CUDA only: weights, activations and other processes


def resolve_kv_dtype(kv_cache_dtype: str, compute_dtype: str, *, dtype_setting: str, device_type: str) -> str:
    """The dtype the cache stores K and V in: the setting, or with "auto" the compute dtype, except on a CPU
    where dtype "auto" chose float32 (no native bf16): float16 there, as llama.cpp's default cache, at half
    of fp32's memory (measured on the bundled model: the same greedy replies, logprobs within 0.005). An
    explicit dtype float32 keeps an fp32 cache: greedy outputs equal to transformers' fp32 ones, which the
    exactness tests hold us to."""
    check_kv_cache_dtype(kv_cache_dtype)
    if kv_cache_dtype != "auto":
        return kv_cache_dtype
    if device_type == "cpu" and dtype_setting == "auto" and compute_dtype == "float32":
        return "float16"
    return compute_dtype


def default_kv_tokens(*, max_model_len: int, max_num_seqs: int, block_size: int) -> int:
    """The rule in the module doc, before its byte bounds: whole blocks for one full-length sequence and a
    working share for each other one."""
    share = min(WORKING_SHARE_TOKENS, max_model_len)
    tokens = max_model_len + (max_num_seqs - 1) * share
    return -(-tokens // block_size) * block_size


def cpu_kv_budget(
    explicit: int | None,
    *,
    bytes_per_token: int,
    max_model_len: int,
    max_num_seqs: int,
    block_size: int,
    ram_bytes: int | None = None,
) -> KVBudget:
    """An explicit budget wins; else the rule in the module doc, within its bounds. `max_model_len` is the
    length the server will accept (the model's context where none is set); `ram_bytes` is the machine's
    RAM (None: read it now), so the memory plan can size a cache for a device it was told of."""
    if explicit is not None:
        if explicit <= 0:
            raise ValueError(f"kv_cache_memory_bytes must be positive, got {explicit}")
        return KVBudget(explicit, f"kv_cache_memory_bytes={explicit}")
    if ram_bytes is None:
        import psutil

        ram_bytes = int(psutil.virtual_memory().total)
    tokens = default_kv_tokens(max_model_len=max_model_len, max_num_seqs=max_num_seqs, block_size=block_size)
    wanted = tokens * bytes_per_token
    ram_cap = int(ram_bytes * DEFAULT_CPU_RAM_FRACTION)
    size = min(wanted, DEFAULT_CPU_KV_BYTES, ram_cap)
    share = min(WORKING_SHARE_TOKENS, max_model_len)
    rule = f"{max_model_len} + ({max_num_seqs} - 1) x {share} = {tokens} tokens"
    if size == wanted:
        bound = ""
    elif size == ram_cap:
        bound = f", cut to {DEFAULT_CPU_RAM_FRACTION:.0%} of RAM"
    else:
        bound = f", cut to the {mib(DEFAULT_CPU_KV_BYTES)} ceiling"
    return KVBudget(size, f"CPU default kv_cache_memory_bytes={size} ({rule}{bound})")


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def max_model_len_error(
    requested: int, *, capacity_tokens: int, needed_bytes: int, budget: KVBudget
) -> ValueError:
    """The message tells the operator both ways out: a shorter context or a bigger cache."""
    fix = f"set kv_cache_memory_bytes to at least {needed_bytes}"
    if budget.total_device_bytes:
        fraction = (budget.other_usage_bytes + needed_bytes) / budget.total_device_bytes
        fix = f"raise gpu_memory_utilization to at least {min(fraction + 0.005, 1.0):.2f}"
        if fraction > 1.0:
            fix = "use a GPU with more memory"
    return ValueError(
        f"max_model_len={requested} needs {mib(needed_bytes)} of KV cache, but {budget.source} leaves "
        f"{mib(budget.bytes)}, enough for {capacity_tokens} tokens. The largest max_model_len that fits is "
        f"{capacity_tokens}; lower max_model_len to that or {fix}."
    )
