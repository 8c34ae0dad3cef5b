"""engine.type: openai from mooncake.yaml: the API key from the variable api_key_env names, never printed;
console-registered models stay native; the composition root picks the engine by type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp.core.config import resolve_settings
from webapp.core.engine_settings import resolve_registered_engine
from webapp.core.models import ModelRegistration
from webapp.serving.config_report import config_report
from webapp.serving.engine import resolve_builtin_engine

REMOTE = "engine: {type: openai, base_url: 'http://vllm:8000/v1', api_key_env: UPSTREAM_KEY}\n"


def _resolve(tmp_path: Path, yaml_text: str, **env: str) -> Any:
    (tmp_path / "mooncake.yaml").write_text(yaml_text)
    environ = {"MOONCAKE_DATA": str(tmp_path / "data"), **env}
    return resolve_settings(environ, base_dir=tmp_path / "checkout", cwd=tmp_path)


def _use(settings: Any, resolved: Any) -> None:
    settings.MOONCAKE_SETTINGS = resolved
    settings.MOONCAKE = resolved.yaml


def test_api_key_env_reads_the_variable(settings: Any, tmp_path: Path) -> None:
    _use(settings, _resolve(tmp_path, REMOTE, UPSTREAM_KEY="sk-upstream"))
    resolved = resolve_builtin_engine(settings.MOONCAKE)
    config = resolved.config
    assert (config.engine_type, config.base_url, config.api_key) == (
        "openai",
        "http://vllm:8000/v1",
        "sk-upstream",
    )
    assert resolved.sources["api_key"].describe() == "env (UPSTREAM_KEY)"
    assert resolved.sources["engine_type"].describe() == "yaml (engine.type)"


@pytest.mark.parametrize(
    ("yaml_text", "env", "message"),
    [
        (REMOTE, {}, "engine.api_key_env names UPSTREAM_KEY, which is not set"),
        (REMOTE.replace("}", ", api_key: sk-file}"), {"UPSTREAM_KEY": "x"}, "both set"),
        (
            "engine: {type: openai, base_url: 'http://h/v1', api_key_env: ''}\n",
            {},
            "must name an environment",
        ),
    ],
)
def test_api_key_env_mistakes_stop_the_start(
    tmp_path: Path, yaml_text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        _resolve(tmp_path, yaml_text, **env)


def test_missing_base_url_names_the_key(settings: Any, tmp_path: Path) -> None:
    _use(settings, _resolve(tmp_path, "engine: {type: openai}\n"))
    with pytest.raises(ValueError, match="base_url is required"):
        resolve_builtin_engine(settings.MOONCAKE)


@pytest.mark.database
def test_check_hides_the_key_and_console_models_stay_native(db: None, settings: Any, tmp_path: Path) -> None:
    _use(settings, _resolve(tmp_path, REMOTE, UPSTREAM_KEY="sk-upstream"))
    extra = ModelRegistration.objects.create(name="extra", source="default")
    builtin = ModelRegistration.objects.create(name="SmolLM2-135M-Instruct", source="default", builtin=True)
    assert resolve_registered_engine(extra).config.engine_type == "native"
    assert resolve_registered_engine(extra).config.api_key is None
    assert resolve_registered_engine(builtin).config.engine_type == "openai"
    report = config_report()
    # The only problem: check's probe of http://vllm:8000, which does not exist here.
    assert len(report.problems) == 1 and report.problems[0].startswith("upstream of "), report.problems
    text = "\n".join(report.lines)
    assert "sk-upstream" not in text
    assert any(line.split()[:2] == ["api_key", "(set,"] for line in report.lines)


def test_the_composition_root_picks_the_engine_by_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from inference import EngineConfig
    from inference.frontends.local.async_engine import AsyncEngine
    from inference.frontends.remote.engine import RemoteEngine
    from webapp.serving.engine import start_engine

    started: list[str] = []
    monkeypatch.setattr(RemoteEngine, "start", classmethod(lambda cls, config: started.append("remote")))
    monkeypatch.setattr(AsyncEngine, "start", classmethod(lambda cls, config: started.append("native")))
    start_engine(EngineConfig(engine_type="openai", base_url="http://h:1/v1"))
    start_engine(EngineConfig())
    assert started == ["remote", "native"]
