"""The settings page (account, defaults for new chats, the prompt library) and the composer's prompt list.

Thin: forms validate, services act, selectors read. Plain forms that redirect after a save, so every
action works without scripts; a rejected form comes back with its errors by the fields and a 400.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.forms import Form
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.accounts.forms import password_rules
from webapp.accounts.own_keys import keys_section
from webapp.accounts.quotas import quota_lines
from webapp.accounts.selectors import usage_daily_for_user
from webapp.core.errors import MooncakeError
from webapp.preferences import selectors, services
from webapp.preferences.forms import DefaultsForm, PromptForm
from webapp.preferences.models import MAX_BODY_CHARS, MAX_PROMPTS_PER_USER, MAX_TITLE_CHARS, SavedPrompt

DEFAULT_FIELDS = ("model", "system_prompt", "temperature", "top_p", "max_tokens")


def user_of(request: HttpRequest) -> User:
    """The logged-in user (every view is behind login_required)."""
    user = request.user
    if not isinstance(user, User):
        raise DjangoPermissionDenied
    return user


def _defaults_values(user: User, form: DefaultsForm | None) -> dict[str, Any]:
    # A rejected form shows what was typed; otherwise the stored values ("" for "server default").
    if form is not None:
        return {f: form.data.get(f, "") for f in DEFAULT_FIELDS}
    stored = selectors.defaults_get(user=user)
    return {
        f: ("" if stored is None or getattr(stored, f) is None else getattr(stored, f))
        for f in DEFAULT_FIELDS
    }


def settings_page_response(
    request: HttpRequest,
    *,
    defaults_form: DefaultsForm | None = None,
    prompt_form: PromptForm | None = None,
    email_form: Form | None = None,
    password_form: Form | None = None,
    new_secret: str | None = None,
    key_error: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """The settings page; a rejected form (any one) comes back with what was typed and its errors."""
    user = user_of(request)
    models = selectors.model_options(user=user)
    prompts = [(p, selectors.can_edit(user=user, prompt=p)) for p in selectors.visible_prompts(user=user)]
    context = {
        "defaults_form": defaults_form,
        "values": _defaults_values(user, defaults_form),
        "has_defaults": selectors.defaults_get(user=user) is not None,
        "models": models,
        "model_names": {m.name for m in models},
        "default_model": selectors.default_model_name(),
        "prompt_form": prompt_form,
        "prompt_values": prompt_form.data if prompt_form is not None else {},
        "prompts": prompts,
        "own_count": selectors.own_prompt_count(user=user),
        "max_prompts": MAX_PROMPTS_PER_USER,
        "max_title": MAX_TITLE_CHARS,
        "max_body": MAX_BODY_CHARS,
        "quotas": quota_lines(user_id=user.pk),
        "usage": usage_daily_for_user(user=user)[:14],
        # Settings, Account (account_views): a password field never comes back filled in.
        "email_form": email_form,
        "email_value": email_form.data.get("email", "") if email_form is not None else user.email,
        "password_form": password_form,
        "has_password": user.has_usable_password(),
        "password_rules": password_rules(),
        # Settings, API keys (key_views): a new secret is in this response only, never stored in clear.
        "api_keys": keys_section(user=user),
        "new_secret": new_secret,
        "key_error": key_error,
    }
    response = render(request, "preferences/settings.html", context, status=status)
    if new_secret:
        add_never_cache_headers(response)  # no cache, shared or the browser's, may keep the secret
    return response


def add_service_error(form: Form, exc: MooncakeError) -> None:
    # A service's refusal lands by its field when it names one the form has.
    form.add_error(exc.param if exc.param in form.fields else None, exc.message)


@login_required
@require_GET
def settings_page(request: HttpRequest) -> HttpResponse:
    return settings_page_response(request)


@login_required
@require_POST
def defaults_save(request: HttpRequest) -> HttpResponse:
    form = DefaultsForm(request.POST, user=user_of(request))
    if form.is_valid():
        try:
            services.defaults_update(user=user_of(request), **form.cleaned_data)
        except MooncakeError as exc:
            add_service_error(form, exc)
        else:
            messages.success(request, "Defaults saved: new chats start with them.")
            return redirect("preferences:settings")
    return settings_page_response(request, defaults_form=form, status=400)


@login_required
@require_POST
def defaults_reset(request: HttpRequest) -> HttpResponse:
    services.defaults_reset(user=user_of(request))
    messages.success(request, "Defaults reset: new chats use the server's defaults.")
    return redirect("preferences:settings")


@login_required
@require_POST
def prompt_create(request: HttpRequest) -> HttpResponse:
    user = user_of(request)
    form = PromptForm(request.POST, can_share=user.is_staff)
    if form.is_valid():
        try:
            prompt = services.prompt_create(user=user, **form.cleaned_data)
        except MooncakeError as exc:
            add_service_error(form, exc)
        else:
            messages.success(
                request, f"Prompt “{prompt.title}” saved: type / in a chat's message box to use it."
            )
            return redirect("preferences:settings")
    return settings_page_response(request, prompt_form=form, status=400)


def _edit_page(
    request: HttpRequest, prompt: SavedPrompt, form: PromptForm | None, status: int = 200
) -> HttpResponse:
    values = (
        form.data
        if form is not None
        else {"title": prompt.title, "body": prompt.body, "shared": prompt.shared}
    )
    context = {
        "prompt": prompt,
        "form": form,
        "values": values,
        "can_share": user_of(request).is_staff,
        "max_title": MAX_TITLE_CHARS,
        "max_body": MAX_BODY_CHARS,
    }
    return render(request, "preferences/prompt_edit.html", context, status=status)


def _forbidden(request: HttpRequest, exc: MooncakeError) -> HttpResponse:
    messages.error(request, exc.message)
    return settings_page_response(request, status=exc.status)


@login_required
@require_http_methods(["GET", "POST"])
def prompt_edit(request: HttpRequest, prompt_id: int) -> HttpResponse:
    user = user_of(request)
    try:
        prompt = selectors.prompt_for_edit(user=user, prompt_id=prompt_id)
    except MooncakeError as exc:
        return _forbidden(request, exc)
    if request.method == "GET":
        return _edit_page(request, prompt, None)
    form = PromptForm(request.POST, can_share=user.is_staff)
    if form.is_valid():
        try:
            services.prompt_update(user=user, prompt=prompt, **form.cleaned_data)
        except MooncakeError as exc:
            add_service_error(form, exc)
        else:
            messages.success(request, f"Prompt “{prompt.title}” saved.")
            return redirect("preferences:settings")
    return _edit_page(request, prompt, form, status=400)


@login_required
@require_POST
def prompt_delete(request: HttpRequest, prompt_id: int) -> HttpResponse:
    user = user_of(request)
    try:
        prompt = selectors.prompt_for_edit(user=user, prompt_id=prompt_id)
        title = prompt.title
        services.prompt_delete(user=user, prompt=prompt)
    except MooncakeError as exc:
        return _forbidden(request, exc)
    messages.success(request, f"Prompt “{title}” deleted.")
    return redirect("preferences:settings")


@login_required
@require_GET
def prompt_library(request: HttpRequest) -> JsonResponse:
    """The composer's "/" list: the user's prompts and shared ones, bounded."""
    items, truncated = selectors.prompt_library(user=user_of(request))
    return JsonResponse({"prompts": items, "truncated": truncated})
