"""One model's EngineConfig from its layers, each field remembering which layer set it.

Lowest first: EngineConfig's defaults (cache_dir: the data directory's), the environment, mooncake.yaml's
`model` and `engine` sections, then the console's rows: the tuning page, then the model's own row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from inference.api import REMOTE_FIELDS, EngineConfig
from webapp.core.config import YAML_DEFAULTS, MooncakeSettings, Sourced
from webapp.core.model_list import LIST_KEYS, SERVING_KEYS, ListedModel

Layer = Mapping[str, Sourced]
# Keys users write that name a field differently (the yaml's `model_id` or `model_path` is
# EngineConfig.model).
_ALIASES = {"model_id": "model", "model_path": "model", "type": "engine_type"}
# What says who runs mooncake.yaml's model: a model registered in the console runs natively whatever
# engine.type says, since base_url and its upstream serve that one model.
_REMOTE_KEYS = frozenset({"engine_type", *REMOTE_FIELDS})
# Resolved into the environment layer (webapp.core.config reads the variable it names).
_RESOLVED_KEYS = frozenset({"api_key_env"})


@dataclass(frozen=True, slots=True)
class ResolvedEngine:
    config: EngineConfig
    sources: dict[str, Sourced]  # every EngineConfig field, with its effective value


def merge_layers(layers: Iterable[Layer]) -> dict[str, Sourced]:
    merged: dict[str, Sourced] = {}
    for layer in layers:
        for key, sourced in layer.items():
            merged[_ALIASES.get(key, key)] = sourced
    return merged


def resolve_engine(layers: Iterable[Layer]) -> ResolvedEngine:
    """Validate the merged layers once, as EngineConfig; raises ValueError naming the bad setting."""
    merged = merge_layers(layers)
    config = EngineConfig.from_dict({key: sourced.value for key, sourced in merged.items()})
    sources = {
        field.name: Sourced(
            value=getattr(config, field.name),
            source=merged[field.name].source if field.name in merged else "default",
            origin=merged[field.name].origin if field.name in merged else "",
        )
        for field in dataclasses.fields(EngineConfig)
    }
    return ResolvedEngine(config=config, sources=sources)


def base_layers(
    mooncake: Mapping[str, Mapping[str, Any]], *, remote: bool = True, listed: ListedModel | None = None
) -> list[Layer]:
    """Everything below the console: the cache folder, the environment's engine settings, the yaml (and
    `listed`'s own entry of model.models over its sections). remote=False leaves out engine.type and the
    remote engine's keys (a console-registered model)."""
    resolved: MooncakeSettings = settings.MOONCAKE_SETTINGS
    cache = resolved.sources["cache_dir"]
    layers: list[Layer] = [
        {"cache_dir": cache.model_copy(update={"value": str(settings.CACHE_DIR)})},
        resolved.engine_env,
        _yaml_layer(mooncake, resolved.yaml_keys),
    ]
    if listed is not None and listed.settings:
        entry = {
            k: Sourced(value=v, source="yaml", origin=f"{listed.key}.{k}") for k, v in listed.settings.items()
        }
        layers.append(entry)
    if remote:
        return layers
    return [{k: v for k, v in layer.items() if _ALIASES.get(k, k) not in _REMOTE_KEYS} for layer in layers]


def _yaml_layer(mooncake: Mapping[str, Mapping[str, Any]], file_keys: frozenset[str]) -> Layer:
    layer: dict[str, Sourced] = {}
    for section in ("model", "engine"):
        values = mooncake.get(section, {})
        for key, value in values.items():
            if key in _RESOLVED_KEYS or key in LIST_KEYS or key in SERVING_KEYS:
                continue
            if key == "model_id" and "model_path" in values:
                continue  # model_path is the synonym the file used; model_id here is only the default
            where = f"{section}.{key}"
            # settings.MOONCAKE fills in YAML_DEFAULTS where the file is silent: those are defaults.
            if where not in file_keys and YAML_DEFAULTS.get(section, {}).get(key, object()) == value:
                layer[key] = Sourced(value=value, source="default")
            else:
                layer[key] = Sourced(value=value, source="yaml", origin=where)
    return layer


def console_layer(values: Mapping[str, Any], origin: str) -> Layer:
    return {key: Sourced(value=value, source="console", origin=origin) for key, value in values.items()}
