"""404 / 503 / 500 mapping of engine and manager failures, in OpenAI's error shape."""

from __future__ import annotations

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.serving import on_demand

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


async def test_unknown_model_is_404(client: AsyncClient) -> None:
    body = {"model": "nope", "messages": USER}
    error = assert_openai_error(await post_json(client, "/v1/chat/completions", body), 404, "not_found_error")
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert_openai_error(await client.get("/v1/models/nope"), 404, "not_found_error")
    assert_openai_error(
        await post_json(client, "/tokenize", {"model": "nope", "prompt": "x"}), 404, "not_found_error"
    )


async def test_model_alias_resolves(client: AsyncClient) -> None:
    response = await post_json(client, "/v1/chat/completions", {"model": "default", "messages": USER})
    assert response.status_code == 200 and response.json()["model"] == "default"
    card = (await client.get("/v1/models/default")).json()
    assert card["id"] == "fake-model" and card["object"] == "model"


@pytest.mark.parametrize("stream", [False, True])
async def test_queue_full_is_503_with_retry_after(
    client: AsyncClient, engine: FakeEngine, stream: bool
) -> None:
    engine.queue_full = True
    response = await post_json(client, "/v1/chat/completions", {"messages": USER, "stream": stream})
    error = assert_openai_error(response, 503, "unavailable_error")
    assert error["code"] == "queue_full"
    assert int(response["Retry-After"]) >= 1


async def test_dead_engine_is_503(client: AsyncClient, engine: FakeEngine) -> None:
    engine.state = "dead"
    response = await post_json(client, "/v1/completions", {"prompt": "x"})
    assert_openai_error(response, 503, "unavailable_error")
    assert response["Retry-After"]


async def test_a_registered_model_not_loaded_loads_on_demand_and_answers(
    client: AsyncClient, manager: FakeModelManager
) -> None:
    manager.unload("fake-model")
    response = await post_json(client, "/v1/chat/completions", {"messages": USER})
    assert response.status_code == 200, response.content
    assert [i.state for i in manager.list()] == ["loaded"]


async def test_a_model_that_cannot_fit_is_a_503_naming_it_and_why(
    client: AsyncClient, manager: FakeModelManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager.unload("fake-model")
    monkeypatch.setattr(on_demand, "read_memory", lambda *_: on_demand.Memory(needed=3 << 30, free=1 << 30))
    response = await post_json(client, "/v1/chat/completions", {"messages": USER})
    error = assert_openai_error(response, 503, "unavailable_error")
    assert error["code"] == "model_unavailable"
    assert "fake-model is not loaded, and there is not enough memory" in error["message"], error
    assert "needs about 3.00 GiB and 1.00 GiB is free" in error["message"], error
    assert [i.state for i in manager.list()] == ["available"]


async def test_unexpected_error_is_500_json(
    client: AsyncClient, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "generate", boom)
    response = await post_json(client, "/v1/chat/completions", {"messages": USER})
    assert_openai_error(response, 500, "server_error")
