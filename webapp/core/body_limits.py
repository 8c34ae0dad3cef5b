"""Refuse request bodies over the size limit: by their Content-Length before a byte of them is read, and a
body without one (chunked) as soon as it passes the limit.

Three layers apply one rule (body_limit, refusal): under Daphne, webapp.serving.body_guard refuses at the
socket, before Twisted buffers the body (it buffers a whole body before any ASGI application runs); the
ASGI middleware here (BodyLimit, in front of Django in webapp/asgi.py) does the same under any ASGI server;
and the Django middleware covers handlers that run without either (WSGI, the test client). The API
answers in OpenAI's JSON; the site with a plain-text 413.

Limits: API paths take JSON only, which Django reads into memory, so settings.DATA_UPLOAD_MAX_MEMORY_SIZE
bounds them (as it bounds request.body). Other paths take form uploads (a chat export), which that setting
does not count, so settings.MOONCAKE_MAX_REQUEST_BYTES bounds them. None means no limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase

from webapp.core.errors import PayloadTooLarge
from webapp.core.middleware import API_PREFIXES

# Above the largest upload the site takes (a 5 MiB chat export, webapp.chat.transfer) plus form overhead.
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


# Paths whose bodies have a limit of their own, registered by their app at start (the console's chunked
# model upload): prefix -> bytes.
_PATH_LIMITS: dict[str, int] = {}


def register_body_limit(prefix: str, limit: int) -> None:
    """Give requests to paths under `prefix` their own body limit, whatever the site-wide one is."""
    _PATH_LIMITS[prefix] = limit


def body_limit(path: str) -> int | None:
    """The most bytes a request body to `path` may have, or None for no limit."""
    for prefix, own in _PATH_LIMITS.items():
        if path.startswith(prefix):
            return own
    if path.startswith(API_PREFIXES):
        limit: int | None = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    else:
        limit = getattr(settings, "MOONCAKE_MAX_REQUEST_BYTES", DEFAULT_MAX_REQUEST_BYTES)
    return limit


def declared_length(request: HttpRequest) -> int | None:
    """The body's Content-Length, or None when absent or malformed (Django then reads what arrives)."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    return length if length >= 0 else None


def _api_error(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than this server accepts ({limit} bytes).", code="request_too_large"
    )


def request_too_large(limit: int) -> HttpResponse:
    """The API's 413, in OpenAI's error shape (built here: the API imports core, never the reverse)."""
    error = _api_error(limit)
    return JsonResponse(error.body(), status=error.status)


def refusal(path: str, limit: int) -> tuple[str, bytes]:
    """The 413's content type and body for `path`: OpenAI's JSON on the API, plain text elsewhere."""
    if path.startswith(API_PREFIXES):
        return "application/json", json.dumps(_api_error(limit).body()).encode()
    text = f"Request body too large: this server accepts at most {limit} bytes.\n"
    return "text/plain; charset=utf-8", text.encode()


def too_large(request: HttpRequest) -> HttpResponseBase | None:
    """The 413 for a request whose declared body is over its path's limit; None to let it through."""
    limit = body_limit(request.path)
    length = declared_length(request)
    if limit is None or length is None or length <= limit:
        return None
    if request.path.startswith(API_PREFIXES):
        return request_too_large(limit)
    content_type, body = refusal(request.path, limit)
    return HttpResponse(body, status=413, content_type=content_type)


# ---- in front of Django, for any ASGI server -----------------------------------------------------------

Scope = dict[str, Any]
Message = dict[str, Any]


def scope_length(scope: Scope) -> int | None:
    """The Content-Length a request declares, or None (absent or malformed: the server frames the body)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            text = bytes(value).decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


class BodyLimit:
    """ASGI middleware: a 413 for a declared body over the limit before `receive` is ever called, and for
    a longer body once its bytes pass the limit (the application is told the client left, and stops)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        limit = body_limit(scope.get("path", "")) if scope["type"] == "http" else None
        if limit is None:
            await self.application(scope, receive, send)
            return
        declared = scope_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(scope, send, limit)
            return
        received, over, started = 0, False, False

        async def counted_receive() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message: Message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Django stops reading at a disconnect (RequestAborted) and answers nothing.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.application(scope, counted_receive, tracked_send)
        if over and not started:
            await self._refuse(scope, send, limit)

    @staticmethod
    async def _refuse(scope: Scope, send: Any, limit: int) -> None:
        content_type, body = refusal(scope.get("path", ""), limit)
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            (b"x-content-type-options", b"nosniff"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def body_limit_middleware(get_response: GetResponse) -> GetResponse:
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponseBase:
            refused = too_large(request)
            if refused is not None:
                return refused
            return await get_response(request)

        return markcoroutinefunction(amiddleware)

    def middleware(request: HttpRequest) -> HttpResponseBase:
        refused = too_large(request)
        if refused is not None:
            return refused
        return get_response(request)  # type: ignore[return-value]

    return middleware


body_limit_middleware.sync_capable = True  # type: ignore[attr-defined]
body_limit_middleware.async_capable = True  # type: ignore[attr-defined]
