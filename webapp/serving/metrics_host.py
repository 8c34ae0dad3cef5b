"""/metrics addressed by the replica's own IP: Prometheus scrapes each replica this way.

docker/prometheus.yml finds the replicas through DNS (one A record each) and requests
`http://<replica IP>:8000/metrics`, so the Host header is that IP. Prometheus cannot set another Host, and
listing container IPs in ALLOWED_HOSTS is impossible (they change) and would open every page to them.

So this middleware, placed before CommonMiddleware (which validates Host), answers GET /metrics itself,
without that check, when the Host header is an IP literal equal to the address the connection arrived on
(SERVER_NAME/SERVER_PORT, which Daphne takes from the accepted socket). Such a Host names this very
socket, so no name a client chose can reach the app; the metrics page builds no URLs from it either way,
and the middleware after this one has nothing to add to it. Every other path, and /metrics with any other
Host, goes through ALLOWED_HOSTS as before. The view still enforces MOONCAKE_METRICS_TOKEN.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest
from django.http.request import split_domain_port
from django.http.response import HttpResponseBase

from webapp.serving.metrics_view import metrics

METRICS_PATH = "/metrics"

GetResponse = Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _host_ip(domain: str) -> Address | None:
    """The IP a Host header's domain part spells: dotted IPv4, or IPv6 in brackets as URLs write it."""
    if domain.startswith("[") and domain.endswith("]"):
        return _ip(domain[1:-1]) if ":" in domain else None
    return _ip(domain) if ":" not in domain else None


def addressed_to_own_ip(request: HttpRequest) -> bool:
    """Whether this is a /metrics request whose Host is the IP (and port) the connection arrived on."""
    if request.path != METRICS_PATH:
        return False
    domain, port = split_domain_port(request.META.get("HTTP_HOST", ""))
    host, local = _host_ip(domain), _ip(request.META.get("SERVER_NAME", ""))
    if host is None or local is None or host.is_unspecified or host != local:
        return False
    return not port or port == str(request.META.get("SERVER_PORT", ""))


def metrics_host_middleware(get_response: GetResponse) -> GetResponse:
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponseBase:
            if addressed_to_own_ip(request):
                response: HttpResponseBase = await sync_to_async(metrics)(request)
                return response
            return await get_response(request)

        return markcoroutinefunction(amiddleware)

    def middleware(request: HttpRequest) -> HttpResponseBase:
        if addressed_to_own_ip(request):
            return metrics(request)
        return get_response(request)  # type: ignore[return-value]

    return middleware


metrics_host_middleware.sync_capable = True  # type: ignore[attr-defined]
metrics_host_middleware.async_capable = True  # type: ignore[attr-defined]
