"""API paths take the lean handler: no session or CSRF middleware, no sync-thread hops; headers, metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django.utils.deprecation
import httpx
import pytest
from prometheus_client import REGISTRY

from webapp.asgi import application
from webapp.core.api_asgi import is_api_path

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of middleware hooks Django sends to its sync thread (MiddlewareMixin.__acall__'s hops)."""
    hops: list[str] = []
    real = django.utils.deprecation.sync_to_async

    def counting(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(func, "__qualname__", repr(func)))
        return real(func, *args, **kwargs)

    monkeypatch.setattr(django.utils.deprecation, "sync_to_async", counting)
    return hops


async def _get(path: str, **headers: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        return await client.get(path, headers=headers)


def test_which_paths_are_api() -> None:
    assert is_api_path("/v1/chat/completions") and is_api_path("/tokenize") and is_api_path("/detokenize")
    assert not is_api_path("/chat/") and not is_api_path("/health") and not is_api_path("/v1")


async def test_api_request_takes_no_sync_thread_hop(thread_hops: list[str]) -> None:
    response = await _get("/v1/models")
    assert response.status_code == 401  # keys are required in tests: the API's own answer, as JSON
    assert response.json()["error"]["type"]
    assert thread_hops == []
    assert "sessionid" not in response.headers.get("set-cookie", "")


async def test_site_request_still_runs_the_full_middleware(thread_hops: list[str]) -> None:
    response = await _get("/chat/")
    assert response.status_code == 302  # first run: no account yet, so the setup page
    assert any("SessionMiddleware" in hop for hop in thread_hops)


async def test_api_responses_keep_security_headers_and_request_metrics() -> None:
    name = "django_http_requests_before_middlewares_total"
    before = REGISTRY.get_sample_value(name) or 0.0
    response = await _get("/v1/models")
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert REGISTRY.get_sample_value(name) == before + 1
    status = REGISTRY.get_sample_value("django_http_responses_total_by_status_total", {"status": "401"})
    assert status is not None and status >= 1
