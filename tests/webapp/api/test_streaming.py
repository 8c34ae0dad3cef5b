"""Disconnects abort the engine request; the server-side timeout cuts long generations; mid-stream errors."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.test import AsyncClient

from inference import EngineDeadError, SamplingParams
from tests.webapp.api.conftest import post_json, sse_events
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine
from webapp.accounts.models import RequestLog
from webapp.accounts.request_log import RequestRecord
from webapp.api.auth import Caller
from webapp.api.responses import _background, _stream_response
from webapp.api.services.pipeline import ApiRun
from webapp.serving.generation import GenerationRun
from webapp.serving.limits import RateLimiter
from webapp.serving.streams import Generation

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


async def run_asgi_until_disconnect(body: bytes, *, disconnect_after_chunks: int) -> list[dict[str, Any]]:
    """Drive Django's real ASGI handler and report `http.disconnect` as Daphne does when a client leaves."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "root_path": "", "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }  # fmt: skip
    gone = asyncio.Event()
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)
        chunks = [m for m in sent if m["type"] == "http.response.body" and m.get("body")]
        if len(chunks) >= disconnect_after_chunks:
            gone.set()

    await asyncio.wait_for(ASGIHandler()(scope, receive, send), timeout=10)
    return sent


async def test_client_disconnect_aborts_the_engine_request(
    manager: Any, auth_off: None, engine: FakeEngine
) -> None:
    engine.token_delay = 0.2
    body = json.dumps({"messages": USER, "stream": True}).encode()
    sent = await run_asgi_until_disconnect(body, disconnect_after_chunks=2)
    assert sent[0]["status"] == 200
    request_id = engine.calls[-1][2]
    assert request_id in engine.aborted and not engine.running
    log = await RequestLog.objects.aget()
    assert log.status_code == 499 and log.completion_tokens < 8


async def test_cancelling_the_request_task_aborts(client: AsyncClient, engine: FakeEngine) -> None:
    engine.token_delay = 0.2
    task = asyncio.create_task(post_json(client, "/v1/chat/completions", {"messages": USER}))
    for _ in range(200):
        if engine.running:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        if await RequestLog.objects.filter(status_code=499).aexists():
            break
        await asyncio.sleep(0.01)
    assert engine.aborted and not engine.running
    assert await RequestLog.objects.filter(status_code=499).aexists()


@pytest.mark.parametrize("stream", [False, True])
async def test_timeout_returns_length(
    client: AsyncClient, engine: FakeEngine, settings: Any, stream: bool
) -> None:
    settings.MOONCAKE_API_REQUEST_TIMEOUT = 1.0
    engine.token_delay = 0.3
    response = await post_json(
        client, "/v1/completions", {"prompt": "x", "max_tokens": 100, "stream": stream}
    )
    assert response.status_code == 200
    if stream:
        events = await sse_events(response)
        assert events[-1]["choices"][0]["finish_reason"] == "length"
        text = "".join(e["choices"][0]["text"] for e in events)
    else:
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "length"
        text = choice["text"]
    assert text and text != engine.script
    assert engine.aborted and not engine.running


async def test_timeout_before_any_token_is_503(
    client: AsyncClient, engine: FakeEngine, settings: Any
) -> None:
    settings.MOONCAKE_API_REQUEST_TIMEOUT = 0.05
    engine.token_delay = 0.5
    response = await post_json(client, "/v1/chat/completions", {"messages": USER, "stream": True})
    assert assert_openai_error(response, 503, "unavailable_error")["code"] == "timeout"
    assert response["Retry-After"]


async def test_error_mid_stream_is_an_event_then_done(
    client: AsyncClient, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = engine._stream

    async def dying(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        count = 0
        async for out in original(*args, **kwargs):
            yield out
            count += 1
            if count == 2:
                raise EngineDeadError("the engine thread died")

    monkeypatch.setattr(engine, "_stream", dying)
    response = await post_json(client, "/v1/chat/completions", {"messages": USER, "stream": True})
    events = await sse_events(response)
    assert events[-1]["error"]["type"] == "unavailable_error"
    # The crash text stays in the log; the event quotes the request id, still known while streaming.
    assert "died" not in events[-1]["error"]["message"]
    assert f"request id {response['X-Request-ID']}" in events[-1]["error"]["message"]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"


async def test_streamed_text_equals_non_streamed(client: AsyncClient) -> None:
    whole = (await post_json(client, "/v1/chat/completions", {"messages": USER})).json()
    events = await sse_events(
        await post_json(client, "/v1/chat/completions", {"messages": USER, "stream": True})
    )
    streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert streamed == whole["choices"][0]["message"]["content"]


async def test_stream_never_started_is_aborted_when_dropped(engine: FakeEngine, db: None) -> None:
    limiter = RateLimiter()
    inner: GenerationRun[Any] = GenerationRun(limiter, limiter.admit([]), "t")
    run = ApiRun(
        inner, Caller(api_key=None, user_id=None, limit_checks=[]), RequestRecord(endpoint="t", stream=True)
    )
    deadline = asyncio.get_running_loop().time() + 10
    generation = Generation(engine, [1, 2], SamplingParams(max_tokens=5), request_id="r1", deadline=deadline)
    await generation.start()
    inner.generations = [generation]

    async def no_events() -> AsyncIterator[dict[str, Any]]:
        if False:
            yield {}

    response = _stream_response(run, no_events())
    del response  # the client left before Django sent a byte of the body
    gc.collect()
    for _ in range(100):
        await asyncio.sleep(0.02)
        if run.closed and engine.aborted:
            break
    # The accounting write runs on: let it end before the test database is flushed under it.
    await asyncio.wait_for(asyncio.gather(*_background), timeout=10)
    assert engine.aborted == ["r1"] and not engine.running
    assert run.record.status_code == 499
    assert await RequestLog.objects.filter(status_code=499).acount() == 1
