"""How many bytes the paged KV cache may take, and the errors that say so. Torch-free: the memory plan
(inference/manager/footprint.py) sizes caches with the same rule before any load."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CPU_KV_BYTES = 2 << 30  # cap for the CPU default: RAM is shared with the web app and other models
DEFAULT_CPU_RAM_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class KVBudget:
    """How many bytes the KV cache may take, and how to say so (and how to get more) in errors."""

    bytes: int
    source: str  # e.g. "kv_cache_memory_bytes=1073741824" or "gpu_memory_utilization=0.90 of 80.0 GiB"
    total_device_bytes: int = 0  # CUDA only: lets errors name the utilization that would fit
    other_usage_bytes: int = 0  # CUDA only: weights, activations and other processes


def cpu_kv_budget(explicit: int | None, *, bytes_needed_for_full_batch: int) -> KVBudget:
    """An explicit budget wins; else min(2 GiB, 25% of RAM, what max_num_seqs full contexts could use)."""
    if explicit is not None:
        if explicit <= 0:
            raise ValueError(f"kv_cache_memory_bytes must be positive, got {explicit}")
        return KVBudget(explicit, f"kv_cache_memory_bytes={explicit}")
    import psutil

    ram = int(psutil.virtual_memory().total)
    default = min(DEFAULT_CPU_KV_BYTES, int(ram * DEFAULT_CPU_RAM_FRACTION), bytes_needed_for_full_batch)
    return KVBudget(default, f"CPU default kv_cache_memory_bytes={default}")


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
