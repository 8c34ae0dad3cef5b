"""Readiness for probes and load balancers. Thin: the logic is in health.py."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from webapp.serving.health import default_engine_readiness


@never_cache
@require_GET
async def health(request: HttpRequest) -> JsonResponse:
    readiness = default_engine_readiness()
    response = JsonResponse(readiness.as_json(), status=200 if readiness.ready else 503)
    # Not Django's "Service Unavailable" error line on every poll: health.py logs each change once.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
