"""/v1/responses with stream: true against the fake engine: typed SSE events, their order and numbering."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_input_limits import byte_tokenizer
from tests.webapp.api.test_responses import SCRIPT, TOOL
from tests.webapp.fake_engine import FakeEngine
from webapp.accounts.models import RequestLog
from webapp.api.models import StoredResponse
from webapp.api.services.streaming import cut_streams
from webapp.core.errors import Unavailable

__all__ = ["byte_tokenizer"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.database]

TEXT_ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    *["response.output_text.delta"] * 8,
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


async def typed_events(response: Any) -> list[dict[str, Any]]:
    """Each frame is `event: <type>\\ndata: <json>`, the type repeated in the data; no [DONE]."""
    assert response["Content-Type"] == "text/event-stream"
    raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    assert "[DONE]" not in raw and raw.endswith("\n\n")
    events = []
    for frame in raw.split("\n\n")[:-1]:
        event_line, data_line = frame.split("\n")
        payload = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {payload['type']}"
        events.append(payload)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


async def stream(client: AsyncClient, **body: Any) -> list[dict[str, Any]]:
    response = await post_json(client, "/v1/responses", {"stream": True, **body})
    assert response.status_code == 200
    return await typed_events(response)


async def test_text_stream_order_and_final_object(client: AsyncClient) -> None:
    events = await stream(client, input="hi")
    assert [e["type"] for e in events] == TEXT_ORDER
    created, final = events[0]["response"], events[-1]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["model"] == "fake-model"
    assert final["id"] == created["id"] and final["status"] == "completed"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == SCRIPT == events[-4]["text"]
    item = events[-2]["item"]
    assert item["status"] == "completed" and item["content"][0]["text"] == SCRIPT
    assert final["output"] == [item]
    assert final["usage"]["output_tokens"] == 8 and final["usage"]["total_tokens"] > 8
    added = events[2]["item"]
    assert added["content"] == [] and added["status"] == "in_progress" and added["id"] == item["id"]


async def test_length_limit_ends_with_incomplete(client: AsyncClient) -> None:
    events = await stream(client, input="hi", max_output_tokens=3)
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete"


async def test_named_function_call_streams_its_arguments(client: AsyncClient) -> None:
    choice = {"type": "function", "name": "get_weather"}
    events = await stream(client, input="weather?", tools=[TOOL], tool_choice=choice)
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * 8,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, done = events[2]["item"], events[-2]["item"]
    assert added["type"] == "function_call" and added["name"] == "get_weather" and added["arguments"] == ""
    assert done["arguments"] == SCRIPT == events[-3]["arguments"] and done["call_id"] == added["call_id"]
    assert events[-1]["response"]["output"] == [done]


async def test_required_call_after_text_in_auto_mode(client: AsyncClient, engine: FakeEngine) -> None:
    engine.script = (
        'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    )
    events = await stream(client, input="weather?", tools=[TOOL])
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    output = events[-1]["response"]["output"]
    assert [o["type"] for o in output] == ["message", "function_call"]
    assert output[0]["content"][0]["text"] == "Let me check."
    assert json.loads(output[1]["arguments"]) == {"city": "Rome"}


async def test_a_server_cut_mid_stream_is_response_failed(client: AsyncClient, engine: FakeEngine) -> None:
    engine.token_delay = 0.05
    response = await post_json(client, "/v1/responses", {"stream": True, "input": "hi"})
    chunks = response.streaming_content.__aiter__()
    first = await anext(chunks)
    assert b"response.created" in first
    cut_streams(lambda: Unavailable("The server is shutting down.", code="server_shutting_down"))
    raw = first + b"".join([c async for c in chunks])
    last = json.loads(raw.decode().split("\n\n")[-2].split("\n")[1].removeprefix("data: "))
    assert last["type"] == "response.failed"
    assert last["response"]["status"] == "failed"
    assert last["response"]["error"] == {
        "code": "server_shutting_down",
        "message": "The server is shutting down.",
    }


async def disconnect_after(body: dict[str, Any], chunks: int) -> list[dict[str, Any]]:
    """Drive Django's ASGI handler and report `http.disconnect` (as Daphne does) after `chunks` chunks."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/responses", "raw_path": b"/v1/responses",
        "root_path": "", "query_string": b"",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }  # fmt: skip
    gone = asyncio.Event()
    pending = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)
        if len([m for m in sent if m["type"] == "http.response.body" and m.get("body")]) >= chunks:
            gone.set()

    await asyncio.wait_for(ASGIHandler()(scope, receive, send), timeout=10)
    return sent


@pytest.mark.parametrize("store", [False, True])
async def test_a_disconnect_stops_the_stream(
    manager: Any, auth_off: None, engine: FakeEngine, store: bool
) -> None:
    engine.token_delay = 0.2
    sent = await disconnect_after({"stream": True, "input": "hi", "store": store}, chunks=4)
    assert sent[0]["status"] == 200
    assert engine.calls[-1][2] in engine.aborted and not engine.running
    log = await RequestLog.objects.aget()
    assert log.status_code == 499 and log.endpoint == "responses"
    rows = [row async for row in StoredResponse.objects.all()]
    if store:  # kept, with what it had, as cancelled
        assert [r.status for r in rows] == ["cancelled"] and rows[0].body["status"] == "cancelled"
    else:
        assert rows == []
