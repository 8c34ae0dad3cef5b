"""First run: until an account exists, every page leads to /setup/ (as Grafana and Open WebUI do)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from webapp.core.first_run import remember_setup_done, setup_known_done
from webapp.core.selectors import ausers_exist, users_exist

# The OpenAI-compatible API's paths (served by webapp.core.api_asgi's lean handler).
API_PREFIXES = ("/v1/", "/tokenize", "/detokenize")
# Machine endpoints and assets never redirect: probes, scrapers and API clients expect their own answers.
# Nor does the documentation: it says how to set up.
EXEMPT_PREFIXES = (
    *("/setup/", "/static/", "/favicon.ico", "/health", "/version", "/metrics", "/docs/"),
    *API_PREFIXES,
)


def _needs_check(request: HttpRequest) -> bool:
    return not setup_known_done() and not request.path.startswith(EXEMPT_PREFIXES)


def _redirect() -> HttpResponse:
    return HttpResponseRedirect(reverse("core:setup"))


def first_run_setup_middleware(
    get_response: Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]],
) -> Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]:
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponse:
            if _needs_check(request):
                if not await ausers_exist():
                    return _redirect()
                remember_setup_done()
            return await get_response(request)

        return markcoroutinefunction(amiddleware)

    def middleware(request: HttpRequest) -> HttpResponse:
        if _needs_check(request):
            if not users_exist():
                return _redirect()
            remember_setup_done()
        return get_response(request)  # type: ignore[return-value]

    return middleware


first_run_setup_middleware.sync_capable = True  # type: ignore[attr-defined]
first_run_setup_middleware.async_capable = True  # type: ignore[attr-defined]
