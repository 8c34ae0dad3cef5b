"""Root URLconf: /health (webapp.api.health), serving (/metrics), core (version, setup, login), chat at
/chat/, the OpenAI API, the console."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from webapp.api.health import health

urlpatterns = [
    path("", RedirectView.as_view(url="/chat/", permanent=False), name="home"),
    # Ahead of core: its /login/ (with sign-up, SSO and the throttle's message) replaces core's plain one.
    path("", include("webapp.accounts.urls")),
    path("", include("webapp.core.urls")),
    path("health", health, name="health"),
    # Ahead of django_prometheus.urls' own "metrics" route, which serving's shadows.
    path("", include("webapp.serving.urls")),
    path("admin/", admin.site.urls),
    path("", include("django_prometheus.urls")),
    path("chat/", include("webapp.chat.urls")),
    path("documents/", include("webapp.documents.urls")),
    path("chat/", include("webapp.organize.urls")),
    path("", include("webapp.api.urls")),
    path("console/", include("webapp.console.urls")),
    path("", include("webapp.preferences.urls")),
]
