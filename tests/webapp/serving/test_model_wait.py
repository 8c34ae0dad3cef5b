"""A request for a model still loading waits for it (up to load_wait_seconds), off the event loop's back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.test import AsyncClient

from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.core.errors import Unavailable
from webapp.serving.runtime import Runtime

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]

BODY = {"model": "slow", "prompt": "hi", "max_tokens": 2}


@pytest.fixture
def manager(runtime: Runtime, settings: Any) -> FakeModelManager:
    """A loaded default model and "slow", still loading; auth off for the API's requests."""
    settings.MOONCAKE_API_AUTH = "off"
    manager = FakeModelManager.with_engine(FakeEngine(model_name="ready"))
    manager.register("slow", None, aliases=["slow-alias"])
    manager.set_state("slow", "loading")
    runtime.install_manager(manager)
    return manager


def wait_for(settings: Any, seconds: float, *, entry: float | None = None) -> None:
    """mooncake.yaml's `model.load_wait_seconds`, and (given `entry`) the listed "slow" model's own."""
    model = {**settings.MOONCAKE["model"], "load_wait_seconds": seconds}
    if entry is not None:
        model.pop("model_id", None)
        model["models"] = [
            {"id": "ready", "model_id": "default", "default": True},
            {"id": "slow", "model_id": "default", "load_wait_seconds": entry},
        ]
    settings.MOONCAKE = {**settings.MOONCAKE, "model": model}


def finish_loading(manager: FakeModelManager, after: float) -> None:
    asyncio.get_running_loop().call_later(after, manager.attach, "slow", FakeEngine(model_name="slow"))


async def post(body: dict[str, Any]) -> Any:
    return await AsyncClient().post("/v1/completions", data=json.dumps(body), content_type="application/json")


async def test_a_request_waits_for_the_load_and_answers(manager: FakeModelManager, settings: Any) -> None:
    wait_for(settings, 0, entry=30)  # the entry's own bound is the one that applies
    finish_loading(manager, 0.5)
    ticks = 0

    async def ticker() -> None:  # the loop keeps serving while the request waits
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    beat = asyncio.create_task(ticker())
    response = await post(BODY)
    beat.cancel()
    assert response.status_code == 200, response.content
    assert response.json()["model"] == "slow" and response.json()["choices"][0]["text"]
    assert ticks >= 5


async def test_an_alias_waits_for_its_model(runtime: Runtime, manager: FakeModelManager) -> None:
    finish_loading(manager, 0.3)
    engine = await runtime.generation.engine("slow-alias")
    assert engine.model_name == "slow"


async def test_past_the_bound_it_is_503_with_retry_after(manager: FakeModelManager, settings: Any) -> None:
    wait_for(settings, 0.3)
    started = asyncio.get_running_loop().time()
    response = await post(BODY)
    assert asyncio.get_running_loop().time() - started >= 0.3  # it did wait, for the bound
    assert response.status_code == 503 and int(response["Retry-After"]) >= 1
    error = response.json()["error"]
    assert error["code"] == "model_loading" and "slow" in error["message"]


async def test_a_zero_bound_answers_at_once(
    runtime: Runtime, manager: FakeModelManager, settings: Any
) -> None:
    wait_for(settings, 0)
    with pytest.raises(Unavailable) as refused:
        await asyncio.wait_for(runtime.generation.engine("slow"), timeout=1)
    assert refused.value.code == "model_loading"


async def test_a_load_that_fails_while_waiting_answers_at_once(
    manager: FakeModelManager, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    wait_for(settings, 30)
    asyncio.get_running_loop().call_later(0.3, manager.set_state, "slow", "failed", "OSError: /secret/path")
    response = await asyncio.wait_for(post(BODY), timeout=5)
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "model_failed" and "failed to load" in error["message"]
    assert "/secret/path" not in error["message"]  # the details go to the log, under the reference
    reference = error["message"].rsplit("request id ", 1)[1].rstrip(").")
    assert any(reference in r.getMessage() and "/secret/path" in r.getMessage() for r in caplog.records)


async def test_a_model_not_on_its_way_is_loaded_and_one_that_failed_is_not_retried(
    runtime: Runtime, manager: FakeModelManager, settings: Any
) -> None:
    wait_for(settings, 30)
    manager.set_state("slow", "available")  # registered, not loaded: the request loads it (on_demand)
    engine = await asyncio.wait_for(runtime.generation.engine("slow"), timeout=10)
    assert engine is manager.get("slow")
    manager.unload("slow")
    manager.set_state("slow", "failed", "OSError: bad file")  # failed before the request came: left so
    with pytest.raises(Unavailable) as refused:
        await asyncio.wait_for(runtime.get_engine("slow"), timeout=1)
    assert refused.value.code == "model_unavailable" and "slow failed to load" in refused.value.message
    assert manager.list()[-1].state == "failed"


async def test_a_disconnect_while_waiting_stops_the_wait(manager: FakeModelManager, settings: Any) -> None:
    """Django's ASGI handler, told `http.disconnect` as Daphne tells it: the request's task is cancelled,
    its wait with it, and no task is left."""
    wait_for(settings, 30)
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions", "root_path": "",
        "query_string": b"", "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }  # fmt: skip
    pending = [{"type": "http.request", "body": json.dumps(BODY).encode(), "more_body": False}]
    gone = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    before = asyncio.all_tasks()
    asyncio.get_running_loop().call_later(0.4, gone.set)
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(ASGIHandler()(scope, receive, send), timeout=10)
    elapsed = asyncio.get_running_loop().time() - started
    assert 0.4 <= elapsed < 5  # it waited until the client left, far short of the 30 s bound
    assert sent == []  # still waiting when the client left: nothing was answered
    await asyncio.sleep(0.2)  # anything still polling the manager would show up now
    assert asyncio.all_tasks() <= before
