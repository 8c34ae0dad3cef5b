"""Refuse request bodies over the size limit by their Content-Length, before anything reads them.

Without this an oversized body is parsed until Django's own limit trips (a 500 outside the API's handlers),
or read whole into memory by a view. The API answers in OpenAI's JSON; the site with a plain-text 413.

Limits: API paths take JSON only, which Django reads into memory, so settings.DATA_UPLOAD_MAX_MEMORY_SIZE
bounds them (as it bounds request.body). Other paths take form uploads (a chat export), which that setting
does not count, so settings.MOONCAKE_MAX_REQUEST_BYTES bounds them. None means no limit.

A body without a Content-Length (chunked) passes here; Django's DATA_UPLOAD_MAX_MEMORY_SIZE and each view's
own size checks still apply to it. Under ASGI, Django's handler has spooled the body to a temporary file
(memory up to FILE_UPLOAD_MAX_MEMORY_SIZE, then disk) before any middleware runs: this stops it being
parsed or read into memory, not received.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase

from webapp.core.errors import PayloadTooLarge
from webapp.core.middleware import API_PREFIXES

# Above the largest upload the site takes (a 5 MiB chat export, webapp.chat.transfer) plus form overhead.
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


def body_limit(path: str) -> int | None:
    """The most bytes a request body to `path` may have, or None for no limit."""
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


def request_too_large(limit: int) -> HttpResponse:
    """The API's 413, in OpenAI's error shape (built here: the API imports core, never the reverse)."""
    error = PayloadTooLarge(
        f"The request body is larger than this server accepts ({limit} bytes).", code="request_too_large"
    )
    return JsonResponse(error.body(), status=error.status)


def too_large(request: HttpRequest) -> HttpResponseBase | None:
    """The 413 for a request whose declared body is over its path's limit; None to let it through."""
    limit = body_limit(request.path)
    length = declared_length(request)
    if limit is None or length is None or length <= limit:
        return None
    if request.path.startswith(API_PREFIXES):
        response: HttpResponseBase = request_too_large(limit)
    else:
        response = HttpResponse(
            f"Request body too large: this server accepts at most {limit} bytes.\n",
            status=413,
            content_type="text/plain; charset=utf-8",
        )
    return response


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
