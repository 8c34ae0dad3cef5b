"""Fixtures for API view tests: a fake engine behind the manager, auth off unless a test asks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import AsyncClient

from tests.webapp.api.live import api_key, api_server, oai
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.serving.runtime import get_runtime

__all__ = ["api_key", "api_server", "oai"]  # session fixtures for the live suites


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(model_name="fake-model", script="Hello there, this is the fake model speaking.")


@pytest.fixture
def manager(engine: FakeEngine) -> Iterator[FakeModelManager]:
    manager = FakeModelManager.with_engine(engine, aliases=["default"])
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().install_manager(None)


@pytest.fixture
def auth_off(settings: Any) -> None:
    settings.MOONCAKE_API_AUTH = "off"


@pytest.fixture
def client(manager: FakeModelManager, auth_off: None, db: None) -> AsyncClient:
    return AsyncClient()


async def post_json(client: AsyncClient, url: str, body: Any, **headers: str) -> Any:
    data = body if isinstance(body, str) else json.dumps(body)
    return await client.post(url, data=data, content_type="application/json", headers=headers)


async def sse_events(response: Any) -> list[Any]:
    """Decoded `data:` payloads of a streaming response, checking the exact framing on the way."""
    raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    assert raw.endswith("data: [DONE]\n\n")
    frames = raw.split("\n\n")
    assert frames[-1] == ""
    events = []
    for frame in frames[:-1]:
        assert frame.startswith("data: "), frame
        payload = frame[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    return events[:-1]
