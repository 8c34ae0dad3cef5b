"""A request id on every request, every log line written while handling it, and its response.

The id lives in a ContextVar: async views, tasks they create and code run through asyncio.to_thread or
sync_to_async (which copy the context) all see it, while concurrent requests on the same loop never see
each other's. A sane X-Request-ID from the client (or a proxy in front) is kept so logs can be joined
across hops; anything else is replaced by a fresh id.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

HEADER = "X-Request-ID"
# Tight on purpose: the id goes into log lines and a response header, so no spaces, quotes or newlines.
_SANE = re.compile(r"[A-Za-z0-9._-]{1,128}")

_request_id: ContextVar[str | None] = ContextVar("mooncake_request_id", default=None)


def get_request_id() -> str | None:
    """The id of the request being handled in this context, None outside requests."""
    return _request_id.get()


def new_request_id() -> str:
    return uuid.uuid4().hex


def sane_request_id(value: str | None) -> str | None:
    """`value` when it is safe to echo and log, else None."""
    if value and _SANE.fullmatch(value):
        return value
    return None


def error_reference() -> str:
    """An id to quote in a generic error and in the log line with its details.

    The current request's id when there is one; outside HTTP requests (WebSocket chat, background tasks)
    a fresh one, which the caller must log alongside the details.
    """
    return get_request_id() or new_request_id()


def _incoming(request: HttpRequest) -> str:
    return sane_request_id(request.headers.get(HEADER)) or new_request_id()


Handler = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


async def _streamed_with_id(content: AsyncIterator[Any], request_id: str) -> AsyncIterator[Any]:
    # A streaming body is produced after the middleware has returned; log lines written while it is
    # generated (SSE token streams) must still carry the id.
    token = _request_id.set(request_id)
    try:
        async for chunk in content:
            yield chunk
    finally:
        # Closed from another context (garbage collection) the reset cannot apply; nothing to undo there.
        with suppress(ValueError):
            _request_id.reset(token)


def request_id_middleware(get_response: Handler) -> Handler:
    """Sets the id for the request's context, as request.request_id, and as the response header."""
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponseBase:
            request_id = _incoming(request)
            request.request_id = request_id  # type: ignore[attr-defined]
            token = _request_id.set(request_id)
            try:
                response: HttpResponseBase = await get_response(request)
            finally:
                _request_id.reset(token)
            if isinstance(response, StreamingHttpResponse) and response.is_async:
                response.streaming_content = _streamed_with_id(
                    response.streaming_content,  # type: ignore[arg-type]
                    request_id,
                )
            response[HEADER] = request_id
            return response

        return markcoroutinefunction(amiddleware)

    def middleware(request: HttpRequest) -> HttpResponseBase:
        request_id = _incoming(request)
        request.request_id = request_id  # type: ignore[attr-defined]
        token = _request_id.set(request_id)
        try:
            response = get_response(request)
        finally:
            _request_id.reset(token)
        assert isinstance(response, HttpResponseBase)
        response[HEADER] = request_id
        return response

    return middleware


request_id_middleware.sync_capable = True  # type: ignore[attr-defined]
request_id_middleware.async_capable = True  # type: ignore[attr-defined]


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record ("-" outside requests), for any formatter to use."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = get_request_id() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (LOG_FORMAT=json), for log shippers that parse rather than grep."""

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        if not request_id or request_id == "-":
            request_id = get_request_id()
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": request_id,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a message argument that is not JSON-serializable must not lose the line.
        return json.dumps(entry, ensure_ascii=False, default=str)
