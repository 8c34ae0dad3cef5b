"""Settings, API keys: make one (its secret shown in that response only) or revoke one of one's own.

Thin: webapp.accounts.own_keys decides who may and acts. A refusal comes back as the settings page with
the reason inline under its status (403 when keys are issued by an admin), never an error page; a key
that is not the user's is a 404, as one that does not exist.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.accounts import own_keys
from webapp.core.errors import MooncakeError
from webapp.preferences.views import settings_page_response, user_of


@login_required
@require_POST
def key_create(request: HttpRequest) -> HttpResponse:
    user = user_of(request)
    try:
        created = own_keys.own_key_create(user=user, name=request.POST.get("name", ""))
    except MooncakeError as exc:
        return settings_page_response(request, key_error=exc.message, status=exc.status)
    return settings_page_response(request, new_secret=created.secret)


@login_required
@require_POST
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    try:
        key = own_keys.own_key_revoke(user=user_of(request), key_id=key_id)
    except MooncakeError as exc:
        raise Http404(exc.message) from exc
    messages.success(request, f"Key {key.prefix}… revoked: it no longer works.")
    return redirect(reverse("preferences:settings") + "#api-keys")
