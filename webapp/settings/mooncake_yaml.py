"""The optional `mooncake.yaml`: engine and server settings in the seed's format (DESIGN.md §3)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ImproperlyConfigured

SECTIONS = ("server", "model", "engine", "api")

DEFAULTS: dict[str, dict[str, Any]] = {
    "server": {"host": "127.0.0.1", "port": 8000},
    "model": {"model_id": "default", "dtype": "auto"},
    "engine": {"type": "native"},
    "api": {"openai_compatible": True},
}


def load_mooncake_config(path: Path | None) -> dict[str, dict[str, Any]]:
    """Defaults overlaid by the file's sections; no file means defaults, a malformed one is an error."""
    config = copy.deepcopy(DEFAULTS)
    if path is None or not path.is_file():
        return config
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ImproperlyConfigured(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return config
    if not isinstance(data, Mapping):
        raise ImproperlyConfigured(f"{path}: the top level must be a mapping of sections {SECTIONS}.")
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ImproperlyConfigured(f"{path}: unknown section(s) {unknown}; expected {list(SECTIONS)}.")
    for section, values in data.items():
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ImproperlyConfigured(f"{path}: section {section!r} must be a mapping.")
        config[section].update(values)
    _check_server(path, config["server"])
    return config


def _check_server(path: Path, server: Mapping[str, Any]) -> None:
    port = server.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ImproperlyConfigured(
            f"{path}: server.port must be an integer between 1 and 65535, got {port!r}."
        )
    if not isinstance(server.get("host"), str):
        raise ImproperlyConfigured(f"{path}: server.host must be a string.")
