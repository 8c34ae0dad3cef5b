from django.conf import settings
from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from webapp.core import docs_site, views

app_name = "core"

urlpatterns = [
    path("version", views.version, name="version"),
    # Browsers ask for /favicon.ico where a page names no icon (JSON, /health, a file opened directly).
    path(
        "favicon.ico",
        RedirectView.as_view(url=f"{settings.STATIC_URL}favicon.svg", permanent=True),
        name="favicon",
    ),
    path("setup/", views.setup, name="setup"),
    # docs/ rendered for anyone, logged in or not (the footer links here).
    path("docs/", docs_site.docs_page, name="docs"),
    path("docs/<path:page>", docs_site.docs_page, name="docs-page"),
    path("banner/dismiss/", views.banner_dismiss, name="banner-dismiss"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="core/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
