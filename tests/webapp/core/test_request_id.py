"""Request ids: taken from a sane X-Request-ID or generated, returned, on every log line, in the API's log."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest
from django.test import Client

from webapp.asgi import application
from webapp.core.request_id import (
    HEADER,
    JsonFormatter,
    RequestIdFilter,
    get_request_id,
    request_id_middleware,
    sane_request_id,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_sane_ids_pass_and_others_do_not() -> None:
    assert sane_request_id("abc-123_x.y") == "abc-123_x.y"
    assert sane_request_id("a" * 128) == "a" * 128
    for bad in (None, "", "a" * 129, "has space", "new\nline", 'quote"', "ünïcode", "semi;colon"):
        assert sane_request_id(bad) is None


def test_incoming_id_is_returned(client: Client) -> None:
    response = client.get("/version", headers={HEADER: "trace-42.a_b"})
    assert response[HEADER] == "trace-42.a_b"


@pytest.mark.parametrize("incoming", [None, "x" * 129, "evil\tvalue", "<script>"])
def test_missing_or_insane_id_is_replaced(client: Client, incoming: str | None) -> None:
    headers = {HEADER: incoming} if incoming is not None else {}
    first = client.get("/version", headers=headers)[HEADER]
    second = client.get("/version", headers=headers)[HEADER]
    assert sane_request_id(first) == first and first != incoming
    assert first != second  # a fresh id per request


async def test_api_handler_returns_the_id_too() -> None:
    # API paths take the lean handler (settings.API_MIDDLEWARE), not the site's middleware.
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        given = await client.get("/v1/models", headers={HEADER: "api-id-1"})
        generated = await client.get("/v1/models")
    assert given.headers[HEADER] == "api-id-1"
    assert sane_request_id(generated.headers[HEADER])


def _json_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(record)) for record in caplog.records]


async def test_log_lines_in_async_code_and_threads_carry_the_id(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("mooncake.test")
    seen: list[str | None] = []

    async def view(request: Any) -> Any:
        from django.http import HttpResponse

        logger.warning("in the view")
        await asyncio.to_thread(logger.warning, "in a thread")
        seen.append(get_request_id())
        return HttpResponse("ok")

    from django.test import RequestFactory

    middleware = request_id_middleware(view)
    with caplog.at_level(logging.WARNING, logger="mooncake.test"):
        await middleware(RequestFactory().get("/", headers={HEADER: "rid-async"}))  # type: ignore[misc]
        await middleware(RequestFactory().get("/"))  # type: ignore[misc]
    lines = _json_lines(caplog)
    assert [line["request_id"] for line in lines[:2]] == ["rid-async", "rid-async"]
    assert lines[2]["request_id"] == lines[3]["request_id"] == seen[1] != "rid-async"
    assert {line["message"] for line in lines} == {"in the view", "in a thread"}
    assert all(line["level"] == "WARNING" and line["logger"] == "mooncake.test" for line in lines)
    assert get_request_id() is None  # nothing leaks past the request


def test_json_formatter_writes_one_object_per_line_with_the_exception() -> None:
    logger = logging.getLogger("mooncake.test.json")
    try:
        raise RuntimeError("kaput\nsecond line")
    except RuntimeError:
        import sys

        record = logger.makeRecord(
            "mooncake.test.json", logging.ERROR, __file__, 1, "failed %s", ("x",), sys.exc_info()
        )
    text = JsonFormatter().format(record)
    assert "\n" not in text
    entry = json.loads(text)
    assert entry["message"] == "failed x" and entry["level"] == "ERROR" and entry["request_id"] is None
    assert "RuntimeError: kaput" in entry["exception"] and entry["time"].endswith("+00:00")


def test_filter_sets_a_placeholder_outside_requests() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    assert RequestIdFilter().filter(record) and record.request_id == "-"  # type: ignore[attr-defined]


def test_settings_switch_to_json_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import webapp.settings.base as base

    monkeypatch.setenv("LOG_FORMAT", "json")
    try:
        reloaded = importlib.reload(base)
        handler = reloaded.LOGGING["handlers"]["console"]
        assert handler["formatter"] == "json" and handler["filters"] == ["request_id"]
        assert reloaded.MIDDLEWARE[0] == "webapp.core.request_id.request_id_middleware"
        assert reloaded.API_MIDDLEWARE[0] == "webapp.core.request_id.request_id_middleware"
    finally:
        monkeypatch.delenv("LOG_FORMAT")
        importlib.reload(base)
