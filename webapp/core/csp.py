"""A strict Content-Security-Policy on the site's HTML pages.

Templates load every script and stylesheet from /static/ and carry no inline scripts, event handlers or
style attributes (tests/webapp/core/test_csp.py keeps it so), so nothing needs 'unsafe-inline': an
injected <script> or on*= attribute does not run. JSON, SSE and files get no policy: browsers do not
render them as documents. WebSocket URLs on the same host match connect-src 'self'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

HEADER = "Content-Security-Policy"
POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    )
)

Handler = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]


def with_policy(response: HttpResponseBase) -> HttpResponseBase:
    """`response` with the policy when it is HTML; a view that set its own policy keeps it."""
    if response.get("Content-Type", "").startswith("text/html") and HEADER not in response:
        response[HEADER] = POLICY
    return response


def csp_middleware(get_response: Handler) -> Handler:
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponseBase:
            return with_policy(await get_response(request))

        return markcoroutinefunction(amiddleware)

    def middleware(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        assert isinstance(response, HttpResponseBase)
        return with_policy(response)

    return middleware


csp_middleware.sync_capable = True  # type: ignore[attr-defined]
csp_middleware.async_capable = True  # type: ignore[attr-defined]
