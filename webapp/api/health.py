"""GET /health: readiness for probes and load balancers (the logic is in webapp.serving.health).

Here, not in serving, because it recognises callers as the API does: the overall state goes to everyone;
the models, their states and load errors to a logged-in user or the holder of a valid API key, each seeing
only the models they may use (webapp.serving.model_access, the rule /v1/models follows). With API auth off,
/v1/models lists the public models to anyone, and so does this; with it required, an anonymous probe sees
no model at all. A wrong key gets no 401: a probe only wants the status code.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from webapp.accounts.selectors import api_key_get_active
from webapp.api.auth import _bearer
from webapp.serving.health import MaySee, default_engine_readiness
from webapp.serving.model_access import ANONYMOUS, Viewer, may_use, restrictions, viewer_for_user


def _key_user(secret: str) -> int | None:
    key = api_key_get_active(secret=secret)
    return key.user_id if key is not None else None


async def _viewer(request: HttpRequest) -> Viewer | None:
    """Whose access to models applies; None: no one's (only the overall state)."""
    token = _bearer(request)
    user_id = await sync_to_async(_key_user)(token) if token is not None else None
    if user_id is None:
        user = await request.auser()
        user_id = user.pk if user.is_authenticated else None
    viewer = await sync_to_async(viewer_for_user)(user_id=user_id) if user_id is not None else ANONYMOUS
    if viewer.user_id is not None:
        return viewer
    return None if getattr(settings, "MOONCAKE_API_AUTH", "required") == "required" else ANONYMOUS


async def _may_see(viewer: Viewer | None) -> MaySee | None:
    if viewer is None:
        return None
    restricted = await sync_to_async(restrictions)()
    return lambda name: may_use(viewer, name, restricted)


@never_cache
@require_GET
async def health(request: HttpRequest) -> JsonResponse:
    readiness = default_engine_readiness()
    body = readiness.as_json(await _may_see(await _viewer(request)))
    response = JsonResponse(body, status=200 if readiness.ready else 503)
    # Not Django's "Service Unavailable" error line on every poll: health.py logs each change once.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
