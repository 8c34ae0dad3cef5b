"""Middleware for the API's lean handler (webapp.core.api_asgi), run on the event loop.

Django calls the hooks of a MiddlewareMixin through sync_to_async(thread_sensitive=True): one hop onto the
process's single sync thread per hook and per request. At 16 concurrent streaming requests those hops
queued behind one another, about 45 ms before the view and 40 ms before the first SSE frame. The hooks
wrapped here only count, set headers or redirect (no database, no blocking I/O), so they run on the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.deprecation import MiddlewareMixin
from django_prometheus.middleware import PrometheusAfterMiddleware, PrometheusBeforeMiddleware


def on_event_loop(middleware: type[MiddlewareMixin]) -> type[MiddlewareMixin]:
    """An async-only subclass of `middleware` whose request, view and response hooks run on the loop."""

    class OnLoop(middleware):  # type: ignore[valid-type, misc]
        sync_capable = False
        async_capable = True

        async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
            response = None
            if hasattr(middleware, "process_request"):
                response = middleware.process_request(self, request)
            response = response or await self.get_response(request)
            if hasattr(middleware, "process_response"):
                response = middleware.process_response(self, request, response)
            return response

        if hasattr(middleware, "process_view"):

            async def process_view(
                self,
                request: HttpRequest,
                view: Callable[..., Any],
                args: tuple[Any, ...],
                kwargs: dict[str, Any],
            ) -> HttpResponseBase | None:
                return middleware.process_view(self, request, view, args, kwargs)

    OnLoop.__name__ = OnLoop.__qualname__ = f"{middleware.__name__}OnLoop"
    return OnLoop


PrometheusBefore = on_event_loop(PrometheusBeforeMiddleware)
Security = on_event_loop(SecurityMiddleware)
Common = on_event_loop(CommonMiddleware)
XFrameOptions = on_event_loop(XFrameOptionsMiddleware)
PrometheusAfter = on_event_loop(PrometheusAfterMiddleware)
