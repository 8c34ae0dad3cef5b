"""cut_streams (a stopping server's drain deadline): running streams end with an error event and [DONE]."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler

from tests.webapp.api.test_validation import USER
from tests.webapp.fake_engine import FakeEngine
from webapp.api.services.streaming import DONE, cut_streams, sse_frames
from webapp.serving.stream_cuts import cut_all_streams

pytestmark = pytest.mark.django_db(transaction=True)


def _cut_error(frame: bytes) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(frame.removeprefix(b"data: "))["error"]
    assert error["type"] == "unavailable_error" and error["code"] == "server_shutting_down"
    return error


@pytest.mark.database
async def test_cut_ends_a_running_stream_with_an_error_event_and_aborts_it(
    manager: Any, auth_off: None, engine: FakeEngine
) -> None:
    engine.token_delay = 0.2
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "root_path": "", "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }  # fmt: skip
    body = json.dumps({"messages": USER, "stream": True, "max_tokens": 100}).encode()
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # the client stays
        raise AssertionError

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            chunks.append(message["body"])
            if len(chunks) == 2:
                assert cut_all_streams() == 1  # what the server calls: the API registered its cutter

    await asyncio.wait_for(ASGIHandler()(scope, receive, send), timeout=10)
    frames = b"".join(chunks).split(b"\n\n")
    assert frames[-1] == b"" and frames[-2] + b"\n\n" == DONE
    _cut_error(frames[-3])
    assert len(frames) < 10  # cut, not run to the end
    assert engine.aborted and not engine.running


async def _events(closed: list[bool], delay: float = 0.0) -> AsyncIterator[dict[str, Any]]:
    try:
        for i in range(100):
            await asyncio.sleep(delay)
            yield {"n": i}
    finally:
        closed.append(True)


async def test_cut_while_waiting_for_the_next_event() -> None:
    closed: list[bool] = []
    frames = sse_frames(_events(closed, delay=10))
    task = asyncio.ensure_future(anext(frames))
    await asyncio.sleep(0.05)
    cut_streams()
    _cut_error(await task)
    assert closed == [True]
    assert await anext(frames) == DONE
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]


async def test_cut_between_frames_and_streams_started_after_a_cut() -> None:
    closed: list[bool] = []
    frames = sse_frames(_events(closed))
    assert await anext(frames) == b'data: {"n":0}\n\n'
    cut_streams()  # this stream is not waiting but sending its frame
    _cut_error(await anext(frames))
    assert await anext(frames) == DONE
    assert closed == [True]
    late = [frame async for frame in sse_frames(_events([]))]
    assert len(late) == 2 and late[1] == DONE
    _cut_error(late[0])


async def test_other_cancellations_still_cancel() -> None:
    closed: list[bool] = []

    async def consume() -> list[bytes]:
        return [frame async for frame in sse_frames(_events(closed, delay=10))]

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == [True]
