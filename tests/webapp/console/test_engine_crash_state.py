"""While a crashed engine restarts, /health, /v1/models, /metrics and the console all say so; afterwards all
say it is loaded again. The manager is the real one; its engines run the fake runner."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inference import AsyncEngine, EngineConfig, EngineDeadError, ModelManager, SamplingParams
from tests.inference.fakes import fake_engine
from webapp.serving.runtime import get_runtime

pytestmark = pytest.mark.database

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    event.set()
    yield event
    event.set()


@pytest.fixture
def real_manager(gate: threading.Event) -> Iterator[ModelManager]:
    def factory(config: EngineConfig) -> Any:
        gate.wait(10)  # lets a test hold a restart in its "restarting"/"loading" phase
        return AsyncEngine(fake_engine(max_model_len=200))

    previous = get_runtime().peek_manager()
    manager = ModelManager(engine_factory=factory, restart_backoff_s=0.2)
    manager.register("base", EngineConfig(model="fake"))
    manager.load("base")
    get_runtime().install_manager(manager)
    yield manager
    gate.set()
    manager.unload("base")
    get_runtime().install_manager(previous)


def crash(engine: AsyncEngine) -> None:
    """A batch fails although each request runs alone: the engine, not a request, is broken."""
    execute = engine.engine.runner.execute

    def batches_fail(chunks: Any) -> Any:
        if len(chunks) > 1:
            raise RuntimeError("device lost")
        return execute(chunks)

    engine.engine.runner.execute = batches_fail

    async def two() -> list[Any]:
        async def one(i: int) -> None:
            async for _ in engine.generate([1, 2, i], GREEDY):
                pass

        return await asyncio.gather(one(1), one(2), return_exceptions=True)

    assert all(isinstance(r, EngineDeadError) for r in asyncio.run(two()))


def wait_state(manager: ModelManager, state: str) -> None:
    deadline = time.monotonic() + 10
    while manager.list()[0].state != state:
        assert time.monotonic() < deadline, manager.list()[0].state
        time.sleep(0.01)


def surfaces(client: Client, staff_client: Client) -> dict[str, Any]:
    health = client.get("/health")
    response = client.get("/v1/models")
    assert response.status_code == 200, response.content
    models = response.json()["data"]
    metrics = client.get("/metrics").content.decode()
    table = staff_client.get(reverse("console:models-table")).content.decode()
    return {
        "health": (health.status_code, health.json()["status"]),
        "models": models,
        "metrics": metrics,
        "table": table,
    }


@pytest.mark.django_db
def test_every_surface_reports_a_crash_restart_consistently(
    client: Client, staff_client: Client, real_manager: ModelManager, gate: threading.Event, settings: Any
) -> None:
    settings.MOONCAKE_API_AUTH = "off"
    before = surfaces(client, staff_client)
    assert before["health"] == (200, "ok")
    gate.clear()
    crash(real_manager.get("base"))
    wait_state(real_manager, "restarting")
    during = surfaces(client, staff_client)
    assert during["health"] == (503, "restarting")
    assert [m["state"] for m in during["models"]] == ["restarting"]
    assert 'mooncake:model_state{model_name="base",state="restarting"} 1.0' in during["metrics"]
    assert 'data-state="restarting"' in during["table"] and "restarting" in during["table"]
    # A request waits for a restart up to load_wait_seconds (webapp.serving.model_wait); past it, a 503.
    settings.MOONCAKE = {**settings.MOONCAKE, "model": {**settings.MOONCAKE["model"], "load_wait_seconds": 0}}
    completion = client.post(
        "/v1/completions", {"model": "base", "prompt": "hi", "max_tokens": 2}, content_type="application/json"
    )
    assert completion.status_code == 503 and completion.has_header("Retry-After")
    gate.set()
    wait_state(real_manager, "loaded")
    after = surfaces(client, staff_client)
    assert after["health"] == (200, "ok")
    assert [m["state"] for m in after["models"]] == ["loaded"]
    assert 'mooncake:engine_restarts_total{model_name="base"} 1.0' in after["metrics"]
    assert 'mooncake:model_state{model_name="base",state="loaded"} 1.0' in after["metrics"]
    assert "restarts after crashes: 1" in after["table"]
