"""Who may use first-run setup: the server's own machine, or whoever holds the token from the server log.

Without this, whoever reaches a fresh server first becomes its administrator. As Jupyter does, a request
from loopback needs nothing, and anyone else needs a token that only the operator can read in the log.
The token is derived from SECRET_KEY, so every replica of one deployment accepts the same one and none is
stored; it stops mattering once the first account exists.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging

from django.conf import settings
from django.http import HttpRequest

logger = logging.getLogger(__name__)

# A proxy in front of us connects from loopback on behalf of someone else.
_PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_FORWARDED")


def setup_token() -> str:
    digest = hmac.new(settings.SECRET_KEY.encode(), b"mooncake first-run setup", hashlib.sha256)
    return digest.hexdigest()[:32]


def is_direct_loopback(request: HttpRequest) -> bool:
    """True only for a request from this machine that no proxy forwarded."""
    if any(request.META.get(header) for header in _PROXY_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def setup_allowed(request: HttpRequest, token: str) -> bool:
    return is_direct_loopback(request) or hmac.compare_digest(token.encode(), setup_token().encode())


def log_setup_link(base_url: str = "") -> None:
    """Print where the administrator is created; the operator reads it in the server log."""
    logger.warning(
        "No account exists yet. Create the administrator at %s/setup/?token=%s "
        "(no token needed from this machine itself).",
        base_url.rstrip("/"),
        setup_token(),
    )
