"""The models mooncake.yaml serves: the `model` section's one model, or its `models` list.

Each entry of `model.models` has an `id` (the name API clients use), `model_id` or `model_path` (the
source), optional `default: true` and `aliases`, and any model or engine setting, which overrides the
top-level `model` and `engine` sections for that model alone (SERVING_KEYS too, the web app's own). Checked
when the settings are read, so a mistake stops the server (and `mooncake check`) with the key that is wrong.
Importable before Django.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from inference.api import REMOTE_FIELDS, EngineConfig
from webapp.core.model_names import DEFAULT_MODEL_NAME as DEFAULT_MODEL_NAME
from webapp.core.model_names import ServedNames, names_from_source, unique_aliases

# Keys an entry (or the `model` section) has that are not EngineConfig fields.
ENTRY_KEYS = frozenset({"id", "default", "aliases"})
# Per-model settings of the web app (how requests meet the model), not EngineConfig fields: an entry's own
# value, else the `model` section's (webapp.core.load_wait resolves them).
SERVING_KEYS = frozenset({"load_wait_seconds"})
SOURCE_KEYS = ("model_id", "model_path")
# Keys of the `model`/`engine` sections that are about the list, not one model's EngineConfig.
LIST_KEYS = frozenset({"models", "enable_multi_model_serving"})
# The top-level keys that name the one model; with a list each entry names its own.
_SINGLE_KEYS = ("model_id", "model_path", "name", "aliases")
_ENGINE_KEYS = frozenset(f.name for f in dataclasses.fields(EngineConfig)) - {"model"} | {"type"}


@dataclass(frozen=True, slots=True)
class ListedModel:
    name: str
    key: str  # where its settings are: "model" (the single form) or "model.models[i]"
    settings: dict[str, Any] = field(default_factory=dict)  # the entry's own settings over the sections
    aliases: tuple[str, ...] = ()
    default: bool = False
    serving: dict[str, Any] = field(default_factory=dict)  # the entry's own SERVING_KEYS


def listed_models(mooncake: Mapping[str, Mapping[str, Any]]) -> list[ListedModel]:
    """The models to register at start, in order (the file's `model.models`, else its one model)."""
    model = mooncake.get("model", {})
    entries = model.get("models")
    if not entries:
        served = served_names(mooncake)
        aliases = unique_aliases(served.name, served.aliases, [str(a) for a in model.get("aliases", [])])
        return [ListedModel(served.name, "model", aliases=aliases, default=True)]
    listed = []
    for index, entry in enumerate(entries):
        own = {k: v for k, v in entry.items() if k not in ENTRY_KEYS | SERVING_KEYS}
        serving = {k: v for k, v in entry.items() if k in SERVING_KEYS}
        aliases = tuple(str(a) for a in entry.get("aliases", []))
        default = entry.get("default") is True
        key = f"model.models[{index}]"
        listed.append(ListedModel(str(entry["id"]), key, own, aliases, default, serving))
    if not any(m.default for m in listed):
        listed[0] = dataclasses.replace(listed[0], default=True)  # the first is the default unless one says
    return listed


def find_listed(mooncake: Mapping[str, Mapping[str, Any]], name: str) -> ListedModel | None:
    """The model mooncake.yaml lists under `name`, if any."""
    return next((m for m in listed_models(mooncake) if m.name == name), None)


def is_list(mooncake: Mapping[str, Mapping[str, Any]]) -> bool:
    return bool(mooncake.get("model", {}).get("models"))


def served_model_name(mooncake: Mapping[str, Mapping[str, Any]]) -> str:
    """The single form's name: `model.name`, else derived from the model's source."""
    return served_names(mooncake).name


def served_names(mooncake: Mapping[str, Mapping[str, Any]]) -> ServedNames:
    """The single form's name and derived aliases: `model.name` alone where set (the user chose it), else
    webapp.core.model_names' for the model's source (`model.aliases` come on top, in listed_models)."""
    model = mooncake.get("model", {})
    explicit = model.get("name")
    if explicit:
        return ServedNames(str(explicit))
    source = model.get("model_path") or model.get("model_id") or model.get("model") or "default"
    return names_from_source(str(source))


def source_of(mooncake: Mapping[str, Mapping[str, Any]], listed: ListedModel) -> str:
    """Where `listed` loads from (its entry's model_id or model_path, else the `model` section's)."""
    for where in (listed.settings, mooncake.get("model", {})):
        for key in ("model_path", "model_id", "model"):
            if where.get(key):
                return str(where[key])
    return "default"


def check_model_section(sections: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    """Raise ImproperlyConfigured naming the key for any mistake in `model.models` and its companions."""
    model, engine = sections.get("model", {}), sections.get("engine", {})

    def fail(message: str) -> None:
        raise ImproperlyConfigured(f"{path}: {message}")

    multi = engine.get("enable_multi_model_serving")
    if multi is not None and not isinstance(multi, bool):
        fail(f"engine.enable_multi_model_serving must be true or false, got {multi!r}.")
    if all(key in model for key in SOURCE_KEYS):
        fail("model.model_id and model.model_path are both set; keep one (model_path is a synonym).")
    for key in SERVING_KEYS & set(model):
        problem = serving_problem(f"model.{key}", model[key])
        if problem:
            fail(problem)
    if "models" not in model:
        return
    entries = model["models"]
    if not isinstance(entries, list) or not entries:
        fail("model.models must be a non-empty list of models, each with an id and a model_id or model_path.")
    single = [f"model.{key}" for key in _SINGLE_KEYS if key in model]
    if single:
        fail(f"{', '.join(single)} name one model; with model.models, set them in each entry instead.")
    if multi is False and len(entries) > 1:
        fail(
            f"engine.enable_multi_model_serving is false but model.models lists {len(entries)} models; "
            "set it to true (the models share one memory budget) or list one model."
        )
    names: dict[str, str] = {}
    top = _top_level(sections)
    for index, entry in enumerate(entries):
        key = f"model.models[{index}]"
        if not isinstance(entry, Mapping):
            fail(f"{key} must be a mapping with an id and a model_id or model_path, got {entry!r}.")
        problem = _entry_problem(key, entry, top)
        if problem:
            fail(problem)
        for name in (entry["id"], *entry.get("aliases", [])):
            if name in names:
                fail(f"{key}: the name {name!r} is already taken by {names[name]}.")
            names[name] = key
    if sum(entry.get("default") is True for entry in entries) > 1:
        fail("more than one entry of model.models says default: true; keep one.")


def _top_level(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The sections' engine settings every entry starts from; None when they are wrong on their own (that
    error is reported, naming its key, where the sections are built into an EngineConfig)."""
    merged = {
        k: v
        for section in ("model", "engine")
        for k, v in sections.get(section, {}).items()
        if k not in LIST_KEYS | SERVING_KEYS and k not in _SINGLE_KEYS and k != "api_key_env"
    }
    try:
        EngineConfig.from_dict(merged)
    except (TypeError, ValueError):
        return None
    return merged


def _entry_problem(key: str, entry: Mapping[str, Any], top: dict[str, Any] | None) -> str | None:
    unknown = sorted(
        str(k) for k in entry if k not in ENTRY_KEYS | SERVING_KEYS | set(SOURCE_KEYS) | _ENGINE_KEYS
    )
    if unknown:
        return (
            f"{key}.{unknown[0]} is not a setting a model entry takes (id, model_id or model_path, "
            "default, aliases, load_wait_seconds, or a model or engine setting)."
        )
    for name in SERVING_KEYS & set(entry):
        problem = serving_problem(f"{key}.{name}", entry[name])
        if problem:
            return problem
    if not isinstance(entry.get("id"), str) or not entry["id"].strip():
        return f"{key}.id is required: the name API clients use for this model."
    sources = [k for k in SOURCE_KEYS if k in entry]
    if len(sources) != 1:
        return f"{key} needs exactly one of model_id or model_path (has {', '.join(sources) or 'neither'})."
    if not isinstance(entry[sources[0]], str) or not entry[sources[0]].strip():
        return f"{key}.{sources[0]} must be 'default', a model folder, a .gguf file or a hub id (org/name)."
    if "default" in entry and not isinstance(entry["default"], bool):
        return f"{key}.default must be true or false, got {entry['default']!r}."
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        return f"{key}.aliases must be a list of names."
    settings = {k: v for k, v in entry.items() if k in _ENGINE_KEYS}
    for name, value in settings.items():
        if name in ("type", *REMOTE_FIELDS):
            continue  # they are checked together, below
        try:
            EngineConfig.from_dict({name: value})
        except (TypeError, ValueError) as exc:
            return f"{key}.{name}: {exc}"
    if top is not None:
        try:
            EngineConfig.from_dict({**top, **settings})
        except (TypeError, ValueError) as exc:
            return f"{key}: {exc}"
    return None


def serving_problem(where: str, value: Any) -> str | None:
    """What is wrong with a SERVING_KEYS value (all of them are seconds), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return f"{where} must be a number of seconds, 0 or more, got {value!r}."
    return None
