"""Memory planning before loading: do the listed models' weights and KV caches fit the budget?

Pure arithmetic over estimates (inference.manager.footprint makes them from the model files), so a server can
refuse a model that would not fit with the reason and the settings that would make it fit, before any load
starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Footprint:
    """One model's estimated memory, and what its settings let the KV cache shrink to."""

    name: str
    key: str  # where its settings live in mooncake.yaml, e.g. "model.models[1]"
    weights_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int  # K and V, every layer, one token
    max_model_len: int
    # How many full-length sequences the KV cache is sized for: 1 when it grows with max_model_len (the
    # minimum one request needs on a GPU; the CPU default's one full context). 0: a fixed size
    # (kv_cache_memory_bytes, or the CPU default cut to a bound).
    kv_sequences: int = 1
    # Tokens beyond those sequences, which do not grow with max_model_len: the CPU default's working share
    # for each other sequence (inference/models/layers/kv_budget.py).
    kv_extra_tokens: int = 0
    kv_rule: str = ""  # how the KV cache was sized, in words (`mooncake check` prints it)
    kv_dtype: str = ""  # what it stores K and V in (kv_cache_dtype resolved)
    block_size: int = 16
    # GPU: the ceiling on the device's use once this model is loaded (its gpu_memory_utilization x the
    # device), and whether its KV cache grows to that ceiling (no kv_cache_memory_bytes), as the runner does.
    ceiling_bytes: int | None = None
    fills_ceiling: bool = False

    @property
    def needed_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Which models fit, in load order, and one message per model that does not."""

    fits: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, str] = field(default_factory=dict)  # each model planned, in words (describe())

    @property
    def ok(self) -> bool:
        return not self.problems


def plan_memory(
    models: Sequence[Footprint],
    *,
    budget_bytes: int | None,
    budget_source: str,
    device_total_bytes: int | None = None,
) -> MemoryPlan:
    """Fit the models in order. `budget_bytes` caps their sum (None: only the GPU ceilings apply); on a GPU
    `device_total_bytes` turns a shortfall into the gpu_memory_utilization that would fit. A model that does
    not fit is left out of the running total, so each later one is judged as if it were never loaded."""
    plan = MemoryPlan(sizes={model.name: describe(model) for model in models})
    used = 0
    for model in models:
        limits = [(budget_bytes, budget_source)] if budget_bytes is not None else []
        if model.ceiling_bytes is not None:
            limits.append((model.ceiling_bytes, f"{model.key}.gpu_memory_utilization"))
        after = used + model.needed_bytes
        over = [(after - limit, limit, source) for limit, source in limits if after > limit]
        if over:
            short, limit, source = max(over)
            plan.problems[model.name] = _message(model, used, short, limit, source, device_total_bytes)
            continue
        plan.fits.append(model.name)
        used = max(after, model.ceiling_bytes or 0) if model.fills_ceiling else after
    return plan


def describe(model: Footprint) -> str:
    """One model's planned memory, with how its KV cache was sized: what `mooncake check` prints."""
    block = model.kv_bytes_per_token * model.block_size
    tokens = model.kv_bytes // block * model.block_size if block else 0  # whole blocks, as allocated
    rule = f"; {model.kv_rule}" if model.kv_rule else ""
    dtype = f" in {model.kv_dtype}" if model.kv_dtype else ""
    kv = f"{tokens} tokens{dtype}, {model.kv_bytes_per_token} bytes each{rule}"
    return (
        f"{model.name}: about {gib(model.needed_bytes)} = {gib(model.weights_bytes)} weights + "
        f"{gib(model.kv_bytes)} KV cache ({kv})"
    )


def _message(
    model: Footprint, used: int, short: int, limit: int, source: str, device_total: int | None
) -> str:
    loaded_before = f", after {gib(used)} for the models before it" if used else ""
    head = (
        f"{model.name} ({model.key}) does not fit: it needs about {gib(model.needed_bytes)} "
        f"({gib(model.weights_bytes)} weights + {gib(model.kv_bytes)} KV cache){loaded_before}, "
        f"{gib(short)} more than the {gib(limit)} that {source} allows."
    )
    return " ".join([head, *suggestions(model, used, limit, device_total, source)])


def suggestions(
    model: Footprint, used: int, limit: int, device_total: int | None, source: str = "the budget"
) -> list[str]:
    """Settings that would make `model` fit under `limit` with `used` bytes already taken."""
    tips: list[str] = []
    room = limit - used - model.weights_bytes
    block = model.kv_bytes_per_token * model.block_size
    per_len = model.kv_bytes_per_token * max(model.kv_sequences, 1)
    if room >= block and model.kv_sequences and per_len > 0:
        tokens = room // model.kv_bytes_per_token - model.kv_extra_tokens
        fit_len = tokens // max(model.kv_sequences, 1) // model.block_size * model.block_size
        if model.block_size <= fit_len < model.max_model_len:
            shared = model.kv_sequences > 1 or model.kv_extra_tokens
            seqs = f" with max_num_seqs {model.kv_sequences}" if model.kv_sequences > 1 else ""
            seqs = seqs or (" (or a lower max_num_seqs)" if shared else "")
            tips.append(
                f"Set {model.key}.max_model_len to {fit_len} or less{seqs} (now {model.max_model_len})."
            )
    sized_for_many = model.kv_sequences != 1 or model.kv_extra_tokens > 0
    if room >= block and sized_for_many and model.kv_bytes > room:
        longest = room // block * model.block_size
        tips.append(
            f"Set {model.key}.kv_cache_memory_bytes to {room} or less (then max_model_len {longest} at most)."
        )
    if device_total:
        fraction = (used + model.needed_bytes) / device_total
        if fraction <= 1.0:
            tips.append(f"Set {model.key}.gpu_memory_utilization to {_round_up(fraction):.2f} or more.")
        else:
            tips.append("The device is too small for it beside the models before it; list fewer models.")
    else:
        tips.append(f"Or raise {source} to {used + model.needed_bytes} bytes or more.")
    return tips


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _round_up(fraction: float) -> float:
    """Up to the next hundredth, so the suggested value really fits."""
    return min(1.0, -(-round(fraction * 10000) // 100) / 100)
