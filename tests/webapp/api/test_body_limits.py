"""Bodies over the limit are refused by Content-Length before any view (or parser) runs (core/body_limits)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, cast

import pytest
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.test import AsyncClient, Client, RequestFactory
from django.urls import reverse

from tests.webapp.api.test_validation import assert_openai_error
from tests.webapp.fake_engine import FakeEngine
from webapp.api import views
from webapp.core.api_asgi import ApiASGIHandler
from webapp.core.body_limits import body_limit_middleware

pytestmark = pytest.mark.django_db(transaction=True)


def never(request: HttpRequest) -> HttpResponse:
    raise AssertionError("the view ran")


async def anever(request: HttpRequest) -> HttpResponse:
    raise AssertionError("the view ran")


def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def run_sync(request: HttpRequest, view: Any = never) -> Any:
    return body_limit_middleware(view)(request)


async def run_async(request: HttpRequest) -> Any:
    return await cast(Awaitable[HttpResponseBase], body_limit_middleware(anever)(request))


def openai_413(response: Any) -> dict[str, Any]:
    """The error of a 413 answered by the middleware itself (no test client to decode it)."""
    assert response.status_code == 413 and response["Content-Type"] == "application/json"
    error: dict[str, Any] = json.loads(response.content)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_too_large"
    return error


def request_with_length(path: str, length: str) -> HttpRequest:
    request = RequestFactory().post(path, data=b"{}", content_type="application/json")
    request.META["CONTENT_LENGTH"] = length
    return request


# ---- the middleware alone, sync and async ------------------------------------------------------------


async def test_api_body_over_the_limit_is_json_413_sync_and_async(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    request = request_with_length("/v1/chat/completions", "1001")
    for response in (run_sync(request), await run_async(request)):
        assert "1000" in openai_413(response)["message"]


async def test_site_body_over_the_limit_is_plain_413(settings: Any) -> None:
    settings.MOONCAKE_MAX_REQUEST_BYTES = 500
    request = request_with_length("/chats/import/", "501")
    for response in (run_sync(request), await run_async(request)):
        assert response.status_code == 413
        assert response["Content-Type"].startswith("text/plain")
        assert b"500 bytes" in response.content


@pytest.mark.parametrize("length", ["1000", "0", "", "nonsense", "-5"])
def test_bodies_within_the_limit_or_without_a_length_pass(settings: Any, length: str) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = run_sync(request_with_length("/tokenize", length), ok)
    assert response.status_code == 200


def test_no_limit_means_no_check(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = None
    settings.MOONCAKE_MAX_REQUEST_BYTES = None
    for path in ("/v1/completions", "/chats/import/"):
        response = run_sync(request_with_length(path, "10" * 9), ok)
        assert response.status_code == 200


# ---- through the installed middleware stacks ---------------------------------------------------------


async def test_oversized_api_body_never_reaches_the_view(
    client: AsyncClient, engine: FakeEngine, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    def unread(request: HttpRequest) -> bytes:
        raise AssertionError("the body was read")

    # Neither ninja's parser nor anything else may read the body: the 413 comes from its length alone.
    monkeypatch.setattr(HttpRequest, "body", property(unread))
    response = await client.post(
        "/v1/completions", data='{"prompt": "' + "a" * 1000 + '"}', content_type="application/json"
    )
    error = assert_openai_error(response, 413, "invalid_request_error")
    assert error["code"] == "request_too_large"
    assert not engine.calls


def test_oversized_site_body_never_reaches_the_view(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.MOONCAKE_MAX_REQUEST_BYTES = 100
    # Not even the login redirect runs: the body is refused before the session or auth middleware.
    response = Client().post(reverse("chat:import"), data=b"x" * 101, content_type="application/octet-stream")
    assert response.status_code == 413
    assert response["Content-Type"].startswith("text/plain")


async def test_api_handler_refuses_by_content_length(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The live API runs settings.API_MIDDLEWARE (webapp.core.api_asgi), not MIDDLEWARE: check that one too.
    # A GET that declares a body over the limit: without the check its view would run and fail.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.MOONCAKE_API_AUTH = "off"
    monkeypatch.setattr(views, "model_cards", lambda *args: pytest.fail("the view ran"))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/v1/models",
        "raw_path": b"/v1/models",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-length", b"5000")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await done.wait()  # the client hangs up once answered
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    await ApiASGIHandler()(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 413
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert b"request_too_large" in body
