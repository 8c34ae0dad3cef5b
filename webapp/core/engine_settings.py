"""The engine-settings row and what it means for each model's EngineConfig (the console writes it)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from webapp.core.config import Sourced
from webapp.core.engine_config import ResolvedEngine, base_layers, console_layer, resolve_engine
from webapp.core.model_list import find_listed
from webapp.core.models import EngineSettings, ModelRegistration

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
    "kv_cache_dtype",
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
    """The saved row, or (before an admin first saves one) an unsaved row of the defaults: a read."""
    row = EngineSettings.objects.order_by("pk").first()
    if row is None:
        row = EngineSettings(log_prompts=bool(getattr(settings, "MOONCAKE_API_LOG_PROMPTS", False)))
    return row


def drain_timeout(row: EngineSettings | None = None) -> float:
    """Seconds running requests get to finish on a stop, unload or restart: the console's override when an
    admin set one, else MOONCAKE_DRAIN_TIMEOUT / server.drain_timeout. Clearing the override restores it."""
    row = row if row is not None else engine_settings_get()
    if row.drain_timeout_seconds is not None:
        return float(row.drain_timeout_seconds)
    return float(getattr(settings, "MOONCAKE_DRAIN_TIMEOUT", 30.0))


def server_overrides(row: EngineSettings) -> dict[str, Any]:
    """The server settings (webapp.core.config names) the console row sets, for `mooncake check`."""
    values: dict[str, Any] = {}
    if row.drain_timeout_seconds is not None:
        values["drain_timeout"] = float(row.drain_timeout_seconds)
    if row.memory_budget_bytes:
        values["memory_budget_bytes"] = int(row.memory_budget_bytes)
    if row.pk is not None:  # once saved, the row's switch is what the API follows
        values["api_log_prompts"] = row.log_prompts
    return values


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


def resolve_registered_engine(
    registration: ModelRegistration, tuning: EngineSettings | None = None
) -> ResolvedEngine:
    """mooncake.yaml's model+engine sections (and, for a model it lists, that entry), then the tuning page,
    then this model's own settings."""
    listed = find_listed(settings.MOONCAKE, registration.name) if registration.builtin else None
    base = base_layers(settings.MOONCAKE, remote=registration.builtin, listed=listed)
    own: dict[str, Any] = {
        "model": registration.source,
        "dtype": registration.dtype,
        "quantization": registration.quantization,
    }
    if registration.max_model_len:
        own["max_model_len"] = registration.max_model_len
    if not registration.builtin:  # a yaml model's task is its entry's (rows made before `task` say generate)
        own["task"] = registration.task
    # Confined at registration and again at every load, so a symlink swapped later cannot escape.
    roots: Sourced = settings.MOONCAKE_SETTINGS.sources["model_roots"]
    confinement = roots.model_copy(update={"value": [str(root) for root in settings.MODEL_ROOTS]})
    return resolve_engine(
        [
            *base,
            console_layer(engine_overrides(tuning or engine_settings_get()), "tuning page"),
            console_layer(own, f"Models page: {registration.name}"),
            {"model_roots": confinement},
        ]
    )
