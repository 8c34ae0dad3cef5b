"""Settings, Account: change one's email or password. Thin: the forms check what was typed, the services
(webapp.accounts.self_service) check the current password and act; a refusal comes back as the settings
page with the reason by its field and a 400, never an error page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from webapp.accounts import self_service
from webapp.core.errors import MooncakeError
from webapp.preferences.account_forms import EmailForm, PasswordForm
from webapp.preferences.views import add_service_error, settings_page_response, user_of

PASSWORD_FIELDS = ("current_password", "new_password1", "new_password2")


def _back() -> HttpResponse:
    return redirect(reverse("preferences:settings") + "#account")


@sensitive_post_parameters(*PASSWORD_FIELDS)
@login_required
@require_POST
def email_change(request: HttpRequest) -> HttpResponse:
    user = user_of(request)
    form = EmailForm(request.POST)
    if form.is_valid():
        try:
            self_service.email_change(
                user=user,
                email=form.cleaned_data["email"],
                current_password=form.cleaned_data["current_password"],
            )
        except MooncakeError as exc:
            add_service_error(form, exc)
        else:
            messages.success(request, f"Email changed to {user.email}.")
            return _back()
    return settings_page_response(request, email_form=form, status=400)


@sensitive_post_parameters(*PASSWORD_FIELDS)
@login_required
@require_POST
def password_change(request: HttpRequest) -> HttpResponse:
    user = user_of(request)
    form = PasswordForm(request.POST, user=user)
    if form.is_valid():
        try:
            self_service.password_change(
                user=user,
                current_password=form.cleaned_data["current_password"],
                new_password=form.cleaned_data["new_password1"],
            )
        except MooncakeError as exc:
            add_service_error(form, exc)
        else:
            # This session takes the new password's hash and stays in; every other one no longer matches.
            update_session_auth_hash(request, user)
            messages.success(request, "Password changed. Your other sessions are logged out.")
            return _back()
    return settings_page_response(request, password_form=form, status=400)
