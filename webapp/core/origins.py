"""The WebSocket Origin check: scheme, host and port must match, as Django's CSRF origin check has them.

Channels' AllowedHostsOriginValidator compares the Origin's host name with ALLOWED_HOSTS only, so a page
on any port or scheme of an allowed host (http://127.0.0.1:9999 for a server on 8090) could open a socket
with the user's cookie. Here an origin passes when it is this request's own origin (the scheme, and the
Host header as Django validates it against ALLOWED_HOSTS, behind a proxy as SECURE_PROXY_SSL_HEADER and
USE_X_FORWARDED_HOST say), or one of CSRF_TRUSTED_ORIGINS ("https://*.example.com" for subdomains), as
CsrfViewMiddleware decides for a POST. A socket without an Origin is refused: browsers always send one.
"""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.utils.http import is_same_domain

Scope = dict[str, Any]


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def own_origin(scope: Scope) -> str | None:
    """The socket's own origin as Django sees a request's: None when its Host is not an allowed host."""
    secure = scope.get("scheme") in ("wss", "https")
    # Django's request does the Host and proxy-header reading, exactly as for the site's pages.
    request = ASGIRequest(
        {**scope, "type": "http", "method": "GET", "scheme": "https" if secure else "http"}, io.BytesIO()
    )
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return f"{'https' if request.is_secure() else 'http'}://{host}"


def trusted_origin(origin: str) -> bool:
    """Whether CSRF_TRUSTED_ORIGINS lists `origin`, exactly or by a "*." subdomain pattern."""
    trusted: list[str] = list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []))
    if origin in (t for t in trusted if "*" not in t):
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    patterns = (urlsplit(t) for t in trusted if "*" in t)
    return any(
        p.scheme == parsed.scheme and is_same_domain(parsed.netloc, p.netloc.lstrip("*")) for p in patterns
    )


def origin_allowed(scope: Scope) -> bool:
    origin = header(scope, b"origin")
    if not origin:
        return False
    return origin == own_origin(scope) or trusted_origin(origin)


class SameOriginValidator:
    """ASGI middleware for WebSocket routes: refuses the handshake (403) unless origin_allowed."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards WebSocket connections only")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
