"""A user's API keys: create (secret shown once), revoke, per-key limits."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from webapp.accounts.models import ApiKey
from webapp.accounts.services import LIMIT_FIELDS, api_key_create, api_key_revoke, api_key_set_limits
from webapp.console.audit import audit_record
from webapp.console.user_forms import KeyCreateForm, LimitsForm
from webapp.console.views.access import staff_required
from webapp.console.views.users import refuse_unless_allowed, render_user_page


@staff_required
@require_POST
def key_create(request: HttpRequest, pk: int) -> HttpResponse:
    user = get_object_or_404(User, pk=pk)
    refuse_unless_allowed(request, user, "keys")
    form = KeyCreateForm(request.POST)
    name = form.cleaned_data["name"] if form.is_valid() else ""
    created = api_key_create(user=user, name=name)
    audit_record(
        actor=request.user, action="key.create", target=f"{user.username}:{created.api_key.prefix}",
        after={"name": name},
    )  # fmt: skip
    # Shown in this response only: the secret is kept nowhere in clear, the session included.
    return render_user_page(request, user, new_secret=created.secret)


@staff_required
@require_POST
def key_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(ApiKey, pk=pk)
    refuse_unless_allowed(request, key.user, "keys")
    api_key_revoke(api_key=key)
    audit_record(actor=request.user, action="key.revoke", target=f"{key.user.username}:{key.prefix}")
    return redirect("console:user", pk=key.user_id)


@staff_required
@require_POST
def key_limits(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(ApiKey, pk=pk)
    refuse_unless_allowed(request, key.user, "keys")
    form = LimitsForm(request.POST, prefix=f"k{key.pk}")
    if not form.is_valid():
        messages.error(request, "Limits must be positive whole numbers or empty.")
        return redirect("console:user", pk=key.user_id)
    before = {n: getattr(key, n) for n in LIMIT_FIELDS}
    api_key_set_limits(api_key=key, **form.cleaned_data)
    audit_record(
        actor=request.user, action="key.limits", target=f"{key.user.username}:{key.prefix}",
        before=before, after=form.cleaned_data,
    )  # fmt: skip
    messages.success(request, f"Limits saved for {key.prefix}….")
    return redirect("console:user", pk=key.user_id)
