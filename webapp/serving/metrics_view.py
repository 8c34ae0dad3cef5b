"""/metrics behind an optional bearer token (MOONCAKE_METRICS_TOKEN), for servers without a private port.

Unset, /metrics stays open as before: the shipped nginx site refuses the path and Prometheus scrapes the
web containers directly. Set, a scraper must send `Authorization: Bearer <token>` (Prometheus:
`authorization: {credentials: <token>}` in the scrape config).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django_prometheus.exports import ExportToDjangoView


def _authorized(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # Constant time: the comparison must not tell a guesser how much of the token was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token: str = getattr(settings, "MOONCAKE_METRICS_TOKEN", "")
    if token and not _authorized(request, token):
        response = HttpResponse("Unauthorized.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    result: HttpResponse = ExportToDjangoView(request)
    return result
