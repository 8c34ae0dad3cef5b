"""Log in (with the SSO button and throttle message), sign up, and the page a throttled login gets."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods

from webapp.accounts.forms import LoginForm, SignUpForm
from webapp.accounts.models import AccountStatus
from webapp.accounts.oidc import SSO_ERROR_SESSION_KEY, oidc_enabled
from webapp.accounts.selectors import signup_settings_get
from webapp.accounts.signup import user_sign_up

LOGIN_TEMPLATE = "core/login.html"


def _login_context(request: HttpRequest) -> dict[str, Any]:
    return {
        "sso_enabled": oidc_enabled(),
        "sso_name": settings.MOONCAKE_OIDC_PROVIDER_NAME,
        "signup_enabled": signup_settings_get().enabled,
        "sso_error": request.session.pop(SSO_ERROR_SESSION_KEY, None),
    }


class MooncakeLoginView(LoginView):
    template_name = LOGIN_TEMPLATE
    form_class = LoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_login_context(self.request)}


def locked_out(request: HttpRequest, credentials: dict[str, Any] | None = None, *args: Any) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the login page again, saying why and for how long, with status 429."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60) if settings.AXES_COOLOFF_TIME else None
    wait = f"Try again in {minutes} minutes" if minutes else "Try again later"
    # Unbound: validating the posted form again would run authenticate() and count one more failure.
    form = LoginForm(request, initial={"username": request.POST.get("username", "")[:150]})
    context = {
        "form": form,
        "next": request.POST.get("next", ""),
        "lockout": (
            f"Too many failed logins for this account or from this address. {wait}, "
            "or ask an administrator to unlock it."
        ),
        **_login_context(request),
    }
    return render(request, LOGIN_TEMPLATE, context, status=429)


@sensitive_post_parameters("password1", "password2")
@csrf_protect
@never_cache
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect(settings.LOGIN_REDIRECT_URL)
    if not signup_settings_get().enabled:
        return render(request, "accounts/signup_closed.html", status=404)
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        user, status = user_sign_up(
            username=data["username"], email=data["email"], password=data["password1"]
        )
        if status.state == AccountStatus.State.APPROVED:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect(settings.LOGIN_REDIRECT_URL)
        return render(request, "accounts/signup_pending.html", {"username": user.username})
    status_code = 400 if request.method == "POST" else 200
    return render(request, "accounts/signup.html", {"form": form}, status=status_code)
