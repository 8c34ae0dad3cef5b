from django.contrib.auth import views as auth_views
from django.urls import path

from webapp.core import views

app_name = "core"

urlpatterns = [
    path("version", views.version, name="version"),
    path("setup/", views.setup, name="setup"),
    path("banner/dismiss/", views.banner_dismiss, name="banner-dismiss"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="core/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
