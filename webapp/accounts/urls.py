"""Log in, sign up and single sign-on, at the site's root (ahead of core's plain login route)."""

from django.urls import path

from webapp.accounts import oidc, views

app_name = "accounts"

urlpatterns = [
    path("login/", views.MooncakeLoginView.as_view(), name="login"),
    path("signup/", views.signup, name="signup"),
    path("oidc/authenticate/", oidc.SsoStartView.as_view(), name="oidc-start"),
    path("oidc/callback/", oidc.SsoCallbackView.as_view(), name="oidc-callback"),
]
