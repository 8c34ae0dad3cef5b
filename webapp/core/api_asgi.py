"""HTTP routing at the ASGI edge: API paths to a lean Django handler, everything else to the full one.

API clients authenticate with bearer keys, not sessions, and send no CSRF tokens or flash messages, so
their requests skip that middleware and run settings.API_MIDDLEWARE instead: metrics, security headers
and URL normalization, all on the event loop (webapp.core.loop_middleware). The URLconf, views and
exception handling are Django's own in both handlers.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

from webapp.core.middleware import API_PREFIXES

Scope = dict[str, Any]


class ApiASGIHandler(ASGIHandler):
    """Django's ASGI handler built with settings.API_MIDDLEWARE in place of settings.MIDDLEWARE."""

    def load_middleware(self, is_async: bool = False) -> None:
        # BaseHandler reads settings.MIDDLEWARE; this runs once, at start-up, before any request.
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full


class ApiOrSite:
    """ASGI app: requests under API_PREFIXES go to `api`, the rest to `site`."""

    def __init__(self, *, api: Any, site: Any) -> None:
        self.api = api
        self.site = site

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        app = self.api if is_api_path(scope.get("path", "")) else self.site
        await app(scope, receive, send)


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)
