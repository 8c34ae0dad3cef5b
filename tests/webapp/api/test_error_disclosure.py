"""Engine failures reach clients as a generic sentence and the request id; the details go to the log."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.test import AsyncClient

from inference.api import EngineError
from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine
from webapp.core.request_id import HEADER

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]

SECRET = "CUDA error: device-side assert at /opt/secret/model.bin"


def _logged_with(caplog: pytest.LogCaptureFixture, request_id: str) -> bool:
    return any(SECRET in r.getMessage() and request_id in r.getMessage() for r in caplog.records)


async def test_dead_engine_hides_its_crash(
    client: AsyncClient, engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    engine.state, engine.error = "dead", SECRET
    with caplog.at_level(logging.ERROR):
        response = await post_json(client, "/v1/completions", {"prompt": "x"}, **{HEADER: "dead-1"})
    error = assert_openai_error(response, 503, "unavailable_error")
    assert error["code"] == "engine_dead" and "request id dead-1" in error["message"]
    assert "CUDA" not in response.content.decode()
    assert _logged_with(caplog, "dead-1")


@pytest.mark.parametrize("stream", [False, True])
async def test_engine_error_is_generic(
    client: AsyncClient,
    engine: FakeEngine,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    async def fail(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        # An async generator, as the engine's: the failure comes at the first output.
        raise EngineError(SECRET)
        yield  # pragma: no cover

    monkeypatch.setattr(engine, "generate", fail)
    with caplog.at_level(logging.ERROR):
        response = await post_json(client, "/v1/chat/completions", {"messages": USER, "stream": stream})
    error = assert_openai_error(response, 500, "server_error")
    request_id = response[HEADER]
    assert error["code"] == "engine_error" and f"request id {request_id}" in error["message"]
    assert "CUDA" not in response.content.decode()
    assert _logged_with(caplog, request_id)
