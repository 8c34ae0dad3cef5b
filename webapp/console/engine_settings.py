"""The engine-settings row and what it means for an EngineConfig (read side; writes live in tuning.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from webapp.console.models import EngineSettings

# EngineSettings fields that map one-to-one onto EngineConfig fields.
ENGINE_FIELDS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_memory_bytes",
    "block_size",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "attention_backend",
    "enforce_eager",
)
# Fields an admin edits on the tuning page, in display order.
TUNING_FIELDS = (
    *ENGINE_FIELDS,
    "default_temperature",
    "default_top_p",
    "default_max_tokens",
    "drain_timeout_seconds",
    "memory_budget_bytes",
    "evict_lru",
    "log_prompts",
)


def engine_settings_get() -> EngineSettings:
    row = EngineSettings.objects.order_by("pk").first()
    if row is None:
        row = EngineSettings.objects.create(
            drain_timeout_seconds=int(getattr(settings, "MOONCAKE_DRAIN_TIMEOUT", 30)),
            log_prompts=bool(getattr(settings, "MOONCAKE_API_LOG_PROMPTS", False)),
        )
    return row


def engine_settings_snapshot(row: EngineSettings) -> dict[str, Any]:
    """The tuning fields as plain JSON values (what the audit log stores)."""
    return {name: getattr(row, name) for name in TUNING_FIELDS}


def engine_overrides(row: EngineSettings) -> dict[str, Any]:
    """EngineConfig keys the admin has set; unset (null) ones keep mooncake.yaml's value."""
    values = {name: getattr(row, name) for name in ENGINE_FIELDS}
    return {name: value for name, value in values.items() if value is not None}


def memory_budget(row: EngineSettings) -> int | None:
    if row.memory_budget_bytes:
        return int(row.memory_budget_bytes)
    return int(getattr(settings, "MOONCAKE_MEMORY_BUDGET_BYTES", 0)) or None


def log_prompts_enabled() -> bool:
    """Whether the API should keep prompt text in its request log (an admin setting, off by default)."""
    return engine_settings_get().log_prompts
