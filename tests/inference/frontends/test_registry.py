"""inference.frontends.registry: every engine type has its front-end, started with what the host supplies.

The front-ends' own start() is replaced by a recorder here: what each one does once started has its own
tests (tests/inference/frontends/..., tests/webapp/test_openai_engine.py, the live suites)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inference.api import ENGINE_TYPES, SUPERVISED_TYPES, EngineConfig
from inference.frontends import registry
from inference.frontends.local.async_engine import AsyncEngine
from inference.frontends.remote.engine import RemoteEngine
from inference.frontends.supervised.engine import SupervisedEngine
from inference.frontends.transformers.engine import TransformersEngine


def _config(engine_type: str) -> EngineConfig:
    return EngineConfig(
        engine_type=engine_type, base_url="http://h:1/v1" if engine_type == "openai" else None
    )


def test_every_engine_type_has_a_starter() -> None:
    assert set(registry.STARTERS) == set(ENGINE_TYPES)


@pytest.mark.parametrize("engine_type", ENGINE_TYPES)
def test_start_runs_the_front_end_the_type_names(
    engine_type: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[str, Any]] = []

    def recorder(name: str) -> Any:
        def start(cls: type, config: EngineConfig, **host: Any) -> str:
            started.append((name, host))
            return name

        return classmethod(start)

    monkeypatch.setattr(AsyncEngine, "start", recorder("native"))
    monkeypatch.setattr(TransformersEngine, "start", recorder("transformers"))
    monkeypatch.setattr(RemoteEngine, "start", recorder("openai"))
    monkeypatch.setattr(SupervisedEngine, "start", recorder("supervised"))
    looked_up: list[str] = []

    def executable(config: EngineConfig) -> str:
        looked_up.append(config.engine_type)
        return f"/opt/{config.engine_type}/bin/serve"

    host = registry.EngineHost(log_dir=tmp_path / "engines", server_executable=executable)
    engine = registry.start(_config(engine_type), host)
    if engine_type in SUPERVISED_TYPES:
        assert engine == "supervised"
        assert started == [
            ("supervised", {"executable": f"/opt/{engine_type}/bin/serve", "log_dir": tmp_path / "engines"})
        ]
        assert looked_up == [engine_type]
    else:
        assert engine == engine_type
        assert started == [(engine_type, {})]
        assert looked_up == []  # only a supervised engine has a server command to find


def test_a_type_without_a_front_end_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(registry.STARTERS, "transformers")
    host = registry.EngineHost(log_dir=tmp_path, server_executable=lambda config: "unused")
    with pytest.raises(ValueError, match="no front-end for engine type 'transformers'"):
        registry.start(_config("transformers"), host)


class NotInstalled(ValueError):
    """Stands for the web layer's EngineNotInstalledError: the registry passes on what the host raises."""


def test_a_missing_server_fails_before_anything_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(config: EngineConfig) -> str:
        raise NotInstalled("vllm is not installed")

    monkeypatch.setattr(SupervisedEngine, "start", classmethod(lambda cls, *a, **k: pytest.fail("started")))
    with pytest.raises(NotInstalled):
        registry.start(_config("vllm"), registry.EngineHost(log_dir=tmp_path, server_executable=missing))
