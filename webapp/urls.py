"""Root URLconf: core (health, version, setup, login), chat at /chat/, the OpenAI API, console, /metrics."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from webapp.appurls import has_module

urlpatterns = [
    path("", RedirectView.as_view(url="/chat/", permanent=False), name="home"),
    path("", include("webapp.core.urls")),
    path("admin/", admin.site.urls),
    path("", include("django_prometheus.urls")),
]
# Apps are built in parallel; each joins the site as soon as its urls.py exists.
for _prefix, _module in (
    ("chat/", "webapp.chat.urls"),
    ("", "webapp.api.urls"),
    ("console/", "webapp.console.urls"),
):
    if has_module(_module):
        urlpatterns.append(path(_prefix, include(_module)))
