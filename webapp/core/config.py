"""Mooncake's configuration, resolved once: defaults, then the environment, then mooncake.yaml.

The settings modules build Django's settings from `resolve_settings()`; nothing else reads a MOONCAKE_*
variable or the file. Each value keeps its source, so `mooncake check` can say where it came from. The
console's rows are a further layer on top (`MooncakeSettings.overlay`, engine_config.py), applied by
the web app where it reads them. Importable before Django is set up: no settings, no models.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from django.core.exceptions import ImproperlyConfigured
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from webapp.core.engine_env import engine_environment
from webapp.core.model_list import check_model_section
from webapp.core.sourced import Source, Sourced

BASE_DIR = Path(__file__).resolve().parent.parent.parent
SECTIONS = ("server", "model", "engine", "api")
# What settings.MOONCAKE holds where the file is silent (the file's own sections go over these).
YAML_DEFAULTS: dict[str, dict[str, Any]] = {
    "server": {"host": "127.0.0.1", "port": 8000},
    "model": {"model_id": "default", "dtype": "auto"},
    "engine": {"type": "native"},
    "api": {"openai_compatible": True},
}


class ServerSettings(BaseModel):
    """Every server-wide setting, validated together; each description is its line in the configuration
    reference (tools/config_reference.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    data_dir: Path = Field(description="The database, Celery's folders, the cache and uploaded models")
    cache_dir: Path = Field(description="Converted GGUFs and compiled CPU kernels (each model's cache_dir)")
    model_roots: tuple[Path, ...] = Field(
        description="Folders (os.pathsep-separated) the console's models must lie in; the first takes uploads"
    )
    config_file: Path | None = Field(
        description="The mooncake.yaml to read; unset: ./mooncake.yaml, else the checkout's"
    )
    host: str = Field(description="The address `mooncake serve` listens on (0.0.0.0: every interface)")
    port: int = Field(gt=0, lt=65536, description="The port `mooncake serve` listens on")
    autoload: bool = Field(
        description="At start, run the start-up tasks (the models folder, console state, model sync, idle "
        "unloads) and load the configured models, in the background; off, the server only answers requests"
    )
    api_auth: Literal["required", "off"] = Field(description="Whether /v1 needs an API key")
    drain_timeout: float = Field(
        ge=0, description="Seconds a stop, unload or restart lets running generations finish"
    )
    memory_budget_bytes: int = Field(ge=0, description="Memory all loaded models may take; 0: no budget")
    api_request_timeout: float = Field(
        gt=0, description="Seconds an API request may generate before it is cut off (finish_reason length)"
    )
    api_requests_per_minute: int = Field(
        ge=0, description="Fallback requests per minute for keys and users without their own; 0: unlimited"
    )
    api_tokens_per_minute: int = Field(
        ge=0, description="Fallback tokens per minute for keys and users without their own; 0: unlimited"
    )
    api_max_concurrent: int = Field(
        ge=0, description="Fallback concurrent requests for keys and users without their own; 0: unlimited"
    )
    api_log_prompts: bool = Field(description="Keep prompt text in the API request log")
    chat_rate_limit_per_minute: int = Field(gt=0, description="Chat messages a user may send per minute")
    chat_max_sockets_per_user: int = Field(
        gt=0, description="Chat sockets (open chat tabs) one user may hold per server process"
    )
    chat_reply_lease_seconds: float = Field(
        ge=3, le=3600, description="Seconds a dead replica's chat reply reads as running, then interrupted"
    )
    replica_name: str = Field(
        max_length=200, description="This replica's name on the console's pages; empty: the host name"
    )

    @field_validator("api_auth", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class Spec:
    """Where a scalar server setting may come from, lowest first: its default, a variable, a yaml key."""

    default: Any
    env: str | None = None
    yaml: str | None = None  # "section.key"


# The settings that say where data lives and which file to read: from the environment only (_path_sources).
PATH_ENV = {
    "data_dir": "MOONCAKE_DATA",
    "cache_dir": "MOONCAKE_CACHE_DIR",
    "model_roots": "MOONCAKE_MODEL_ROOTS",
    "config_file": "MOONCAKE_CONFIG",
}
SPECS: dict[str, Spec] = {
    "host": Spec("127.0.0.1", yaml="server.host"),
    "port": Spec(8000, yaml="server.port"),
    "autoload": Spec(True, env="MOONCAKE_AUTOLOAD"),
    "api_auth": Spec("required", env="MOONCAKE_API_AUTH"),
    "drain_timeout": Spec(30.0, env="MOONCAKE_DRAIN_TIMEOUT", yaml="server.drain_timeout"),
    "memory_budget_bytes": Spec(0, env="MOONCAKE_MEMORY_BUDGET_BYTES"),
    "api_request_timeout": Spec(600.0, env="MOONCAKE_API_REQUEST_TIMEOUT"),
    "api_requests_per_minute": Spec(0, env="MOONCAKE_API_REQUESTS_PER_MINUTE"),
    "api_tokens_per_minute": Spec(0, env="MOONCAKE_API_TOKENS_PER_MINUTE"),
    "api_max_concurrent": Spec(0, env="MOONCAKE_API_MAX_CONCURRENT"),
    "api_log_prompts": Spec(False, env="MOONCAKE_API_LOG_PROMPTS"),
    "chat_rate_limit_per_minute": Spec(30, env="MOONCAKE_CHAT_RATE_LIMIT_PER_MINUTE"),
    "chat_max_sockets_per_user": Spec(32, env="MOONCAKE_CHAT_MAX_SOCKETS_PER_USER"),
    "chat_reply_lease_seconds": Spec(30.0, env="MOONCAKE_CHAT_REPLY_LEASE_SECONDS"),
    # Empty: the host name (each container's own); set it where replicas share a host.
    "replica_name": Spec("", env="MOONCAKE_REPLICA_NAME"),
}

# Where local use's defaults differ (webapp.settings.local: one machine, one user, so the API is open).
LOCAL_DEFAULTS: dict[str, Any] = {"api_auth": "off"}
# Where the production settings' defaults differ: a server facing many users gets fallback API limits
# (per key, and per user over all their keys); local use keeps SPECS' 0, unlimited. 0 in the variable
# still means unlimited, for an operator who wants that.
PRODUCTION_DEFAULTS: dict[str, Any] = {
    "api_requests_per_minute": 60,
    "api_tokens_per_minute": 100_000,
    "api_max_concurrent": 4,
}


class MooncakeSettings(BaseModel):
    """The resolved configuration: validated server settings, the source of each, and the file's
    sections (settings.MOONCAKE) from which engine_config.py builds each model's EngineConfig."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    server: ServerSettings
    sources: dict[str, Sourced]
    yaml: dict[str, dict[str, Any]]
    yaml_keys: frozenset[str]  # "section.key" the file itself set, as opposed to YAML_DEFAULTS
    engine_env: dict[str, Sourced]

    def overlay(self, values: Mapping[str, Any], *, source: Source, origin: str) -> MooncakeSettings:
        """These values on top (the console's overrides), validated again."""
        layered = dict(self.sources)
        layered.update({k: Sourced(value=v, source=source, origin=origin) for k, v in values.items()})
        server, sources = _validate(layered)
        return self.model_copy(update={"server": server, "sources": sources})


def resolve_settings(
    environ: Mapping[str, str] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    discover: bool = True,
    base_dir: Path = BASE_DIR,
    cwd: Path | None = None,
) -> MooncakeSettings:
    """Read the environment and the file once. `defaults` replace SPECS' (a settings module's own,
    e.g. auth off for local use); `discover=False` reads only a file MOONCAKE_CONFIG names."""
    env = {k: v.strip() for k, v in (os.environ if environ is None else environ).items() if v.strip()}
    cwd = cwd or Path.cwd()
    sources = _path_sources(env, base_dir, cwd, discover)
    config_file = sources["config_file"].value
    raw = _read_yaml(config_file)
    for name, spec in SPECS.items():
        sourced = Sourced(value=(defaults or {}).get(name, spec.default), source="default")
        if spec.env and spec.env in env:
            sourced = Sourced(value=env[spec.env], source="env", origin=spec.env)
        section, _, key = (spec.yaml or "").partition(".")
        if key in raw.get(section, {}):
            sourced = Sourced(value=raw[section][key], source="yaml", origin=spec.yaml or "")
        sources[name] = sourced
    engine_env = engine_environment(raw.get("engine", {}), env)
    server, sources = _validate(sources)
    return MooncakeSettings(
        server=server,
        sources=sources,
        yaml=_over_defaults(raw),
        yaml_keys=frozenset(f"{s}.{k}" for s, values in raw.items() for k in values),
        engine_env=engine_env,
    )


def api_limits(server: ServerSettings) -> dict[str, int | None]:
    """settings.MOONCAKE_API_LIMITS: the fallback limits, None (not 0) where unlimited."""
    return {
        "requests_per_minute": server.api_requests_per_minute or None,
        "tokens_per_minute": server.api_tokens_per_minute or None,
        "max_concurrent_requests": server.api_max_concurrent or None,
    }


def load_mooncake_config(path: Path | None) -> dict[str, dict[str, Any]]:
    """The file's sections over YAML_DEFAULTS; no file means the defaults, a malformed one is an error."""
    return _over_defaults(_read_yaml(path))


def _over_defaults(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    merged = copy.deepcopy(YAML_DEFAULTS)
    for section, values in raw.items():
        merged[section].update(values)
    return merged


def _path(raw: str) -> Path:
    return Path(raw).expanduser().resolve()


def _path_sources(env: Mapping[str, str], base_dir: Path, cwd: Path, discover: bool) -> dict[str, Sourced]:
    """Where data lives and which file to read: environment or derived defaults, never the file."""

    def pick(name: str, default: Any, parse: Any = _path) -> Sourced:
        var = PATH_ENV[name]
        if var in env:
            return Sourced(value=parse(env[var]), source="env", origin=var)
        return Sourced(value=default, source="default")

    data = pick("data_dir", base_dir / "var")
    roots = pick(
        "model_roots",
        (_path(str(data.value / "models")),),
        lambda raw: tuple(_path(p.strip()) for p in raw.split(os.pathsep) if p.strip()),
    )
    # MOONCAKE_CONFIG names the file; otherwise ./mooncake.yaml, then the checkout's.
    candidates = (cwd / "mooncake.yaml", base_dir / "mooncake.yaml") if discover else ()
    found = next((p for p in candidates if p.is_file()), None)
    return {
        "data_dir": data,
        "cache_dir": pick("cache_dir", data.value / "cache"),
        "model_roots": roots,
        "config_file": pick("config_file", found),
    }


def _validate(sources: Mapping[str, Sourced]) -> tuple[ServerSettings, dict[str, Sourced]]:
    """The validated settings, and the sources holding validated values (30.0, not the variable's "30")."""
    try:
        server = ServerSettings.model_validate({k: s.value for k, s in sources.items()})
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = str(error["loc"][0])
            where = sources[name].origin or name
            problems.append(f"{where}={sources[name].value!r}: {error['msg']}")
        raise ImproperlyConfigured("; ".join(problems)) from None
    return server, {k: s.model_copy(update={"value": getattr(server, k)}) for k, s in sources.items()}


class _ServerSection(BaseModel):
    """The file's server section, strictly typed: a quoted port is a mistake to report, not coerce."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, gt=0, lt=65536)
    drain_timeout: float | None = Field(default=None, ge=0)


def _read_yaml(path: Path | None) -> dict[str, dict[str, Any]]:
    """The sections the file sets, checked; {} when there is no file."""
    if path is None or not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ImproperlyConfigured(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ImproperlyConfigured(f"{path}: the top level must be a mapping of sections {SECTIONS}.")
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ImproperlyConfigured(f"{path}: unknown section(s) {unknown}; expected {list(SECTIONS)}.")
    sections: dict[str, dict[str, Any]] = {}
    for section, values in data.items():
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ImproperlyConfigured(f"{path}: section {section!r} must be a mapping.")
        sections[section] = dict(values)
    try:
        _ServerSection.model_validate(sections.get("server", {}))
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        raise ImproperlyConfigured(
            f"{path}: server.{field} is invalid ({error['msg']}), got {error.get('input')!r}."
        ) from None
    check_model_section(sections, path)
    return sections
