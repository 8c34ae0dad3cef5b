"""`load_wait_seconds`: checked where mooncake.yaml is read, resolved per model, shown by `mooncake check`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from webapp.core.config import resolve_settings
from webapp.core.load_wait import DEFAULT_LOAD_WAIT_SECONDS, load_wait
from webapp.core.model_list import listed_models
from webapp.serving.engine import resolve_builtin_engine


def _settings(tmp_path: Path, config: dict[str, Any]) -> Any:
    path = tmp_path / "mooncake.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_CONFIG": str(path)}
    return resolve_settings(env, base_dir=tmp_path, cwd=tmp_path)


def _listed(**entry: Any) -> dict[str, Any]:
    return {"models": [{"id": "a", "model_id": "default"}, {"id": "b", "model_id": "default", **entry}]}


@pytest.mark.parametrize("value", [-1, "soon", True, float("inf"), None, [5]])
@pytest.mark.parametrize("where", ["model", "entry"])
def test_anything_but_seconds_stops_the_server_naming_the_key(tmp_path: Path, where: str, value: Any) -> None:
    model = {"load_wait_seconds": value} if where == "model" else _listed(load_wait_seconds=value)
    key = r"model\.load_wait_seconds" if where == "model" else r"model\.models\[1\]\.load_wait_seconds"
    with pytest.raises(ImproperlyConfigured, match=rf"{key} must be a number of seconds, 0 or more"):
        _settings(tmp_path, {"model": model})


def test_each_model_gets_its_own_else_the_sections_else_the_default(tmp_path: Path) -> None:
    default = _settings(tmp_path, {"model": _listed()}).yaml
    assert load_wait(default, "b").value == DEFAULT_LOAD_WAIT_SECONDS == 120
    assert load_wait(default, "b").source == "default"
    mooncake = _settings(tmp_path, {"model": {"load_wait_seconds": 30, **_listed(load_wait_seconds=0)}}).yaml
    own, section = load_wait(mooncake, "b"), load_wait(mooncake, "a")
    assert (own.value, own.source, own.origin) == (0.0, "yaml", "model.models[1].load_wait_seconds")
    assert (section.value, section.origin) == (30.0, "model.load_wait_seconds")
    assert load_wait(mooncake, "registered-in-the-console").value == 30.0
    assert load_wait(mooncake, None).value == 30.0


def test_the_setting_is_the_web_apps_not_the_engines(tmp_path: Path) -> None:
    """Neither the section's value nor an entry's reaches EngineConfig, which would refuse the key."""
    mooncake = _settings(tmp_path, {"model": {"load_wait_seconds": 5, **_listed(load_wait_seconds=2.5)}}).yaml
    listed = listed_models(mooncake)
    assert listed[1].serving == {"load_wait_seconds": 2.5} and "load_wait_seconds" not in listed[1].settings
    for model in listed:
        assert "load_wait_seconds" not in resolve_builtin_engine(mooncake, model).sources
    single = _settings(tmp_path, {"model": {"model_id": "default", "load_wait_seconds": 5}}).yaml
    assert load_wait(single, listed_models(single)[0].name).value == 5.0
    resolve_builtin_engine(single)


@pytest.mark.database
def test_check_shows_each_models_wait_and_its_source(db: None, settings: Any, tmp_path: Path) -> None:
    from webapp.serving.config_report import config_report

    resolved = _settings(tmp_path, {"model": {"load_wait_seconds": 45, **_listed(load_wait_seconds=0)}})
    settings.MOONCAKE_SETTINGS, settings.MOONCAKE = resolved, resolved.yaml
    lines = config_report().lines
    assert "load wait:    a: 45 s, yaml (model.load_wait_seconds)" in lines
    assert "load wait:    b: 0 s, yaml (model.models[1].load_wait_seconds)" in lines
