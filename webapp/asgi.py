"""ASGI entry point: HTTP to Django (static files included), WebSocket through origin and auth checks.

Daphne does not speak the ASGI lifespan protocol, so the runtime starts here, once the application is
built (MOONCAKE_AUTOLOAD; off in tests): start hooks, then the default model, in a background thread.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")
django_asgi_app = get_asgi_application()

# Imported after Django is set up: consumers import models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from webapp.core.api_asgi import ApiASGIHandler, ApiOrSite  # noqa: E402
from webapp.core.body_limits import BodyLimit  # noqa: E402
from webapp.core.origins import SameOriginValidator  # noqa: E402
from webapp.routing import websocket_urlpatterns  # noqa: E402
from webapp.serving.runtime import get_runtime  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Bodies over the limit are refused before they are read (webapp.core.body_limits). API paths take
        # Django with the lean API middleware; of the rest, only /static/ requests take the static handler
        # and everything else goes straight to Django.
        "http": BodyLimit(ApiOrSite(api=ApiASGIHandler(), site=ASGIStaticFilesHandler(django_asgi_app))),
        # The Origin's scheme, host and port must be the server's own (or CSRF_TRUSTED_ORIGINS).
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# Import every URLconf now, on this thread: a broken app fails at start-up rather than on a first request,
# and the first request cannot race the model-loading thread through transformers' lazy imports.
get_resolver().url_patterns  # noqa: B018

if settings.MOONCAKE_AUTOLOAD:
    get_runtime().start()
