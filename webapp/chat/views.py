"""Chat pages and htmx fragments. Thin: forms validate, services act, selectors read."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_POST

from webapp.chat import events, model_loading, selectors, services, transfer
from webapp.chat.forms import ImportForm, ModelForm, SettingsForm
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest


def _user(request: HttpRequest) -> User:
    """The logged-in user (every view is behind login_required)."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user


def _page(request: HttpRequest) -> int:
    try:
        return max(1, int(request.GET.get("page", "1")))
    except ValueError:
        return 1


def _settings_context(
    conversation: Conversation, form: SettingsForm | None = None, saved: bool = False
) -> dict[str, Any]:
    # A rejected form shows what was typed; otherwise the stored values.
    fields = ("model", "system_prompt", "temperature", "top_p", "max_tokens")
    values = (
        {f: form.data.get(f, "") for f in fields} if form else {f: getattr(conversation, f) for f in fields}
    )
    return {
        "conversation": conversation,
        "values": values,
        "models": selectors.chat_models(user_id=conversation.user_id),
        "default_model": selectors.default_model_name(),
        "form": form,
        "saved": saved,
    }


def _picker_context(conversation: Conversation, error: str = "") -> dict[str, Any]:
    return model_loading.picker_context(conversation, error)


def _broadcast_model(conversation: Conversation, error: str = "") -> str:
    """The picker for the chat's current model, sent to every tab of the chat; returns its HTML (with
    `error`, why the picked model cannot load, for the tab that picked it only)."""
    html = model_loading.picker_html(conversation)
    async_to_sync(events.broadcast)(conversation.pk, events.model(conversation, html))
    return model_loading.picker_html(conversation, error) if error else html


@login_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """The user's empty chat if there is one; else a page whose form POSTs to `new` (a GET never writes)."""
    draft = selectors.draft_conversation(user=_user(request))
    if draft is not None:
        return redirect("chat:detail", conversation_id=draft.pk)
    return render(request, "chat/start.html")


@login_required
@require_POST
def new(request: HttpRequest) -> HttpResponse:
    conversation = services.conversation_new(user=_user(request))
    return redirect("chat:detail", conversation_id=conversation.pk)


@login_required
@require_GET
def detail(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    query = request.GET.get("q", "")
    messages_list = selectors.conversation_messages(conversation=conversation)
    context = {
        **_settings_context(conversation),
        **_picker_context(conversation),
        "messages_list": messages_list,
        "page": selectors.conversation_page(user=_user(request), query=query),
        "query": query,
        "current_id": conversation.pk,
    }
    return render(request, "chat/page.html", context)


@login_required
@require_GET
def conversation_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "")
    page = selectors.conversation_page(user=_user(request), query=query, page=_page(request))
    current = request.GET.get("current", "")
    context = {"page": page, "query": query, "current_id": int(current) if current.isdigit() else None}
    return render(request, "chat/_conversation_list.html", context)


@login_required
@require_POST
def delete(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    detail_path = reverse("chat:detail", args=[conversation.pk])
    services.conversation_delete(conversation=conversation)
    if not request.headers.get("HX-Request"):
        return redirect("chat:index")
    response = HttpResponse("")
    # Deleting the chat on screen leaves nothing to show: go to a fresh one.
    if urlsplit(request.headers.get("HX-Current-URL", "")).path == detail_path:
        response["HX-Redirect"] = reverse("chat:index")
    return response


@login_required
@require_POST
def update_settings(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    form = SettingsForm(request.POST, user_id=conversation.user_id)
    if not form.is_valid():
        return render(request, "chat/_settings.html", _settings_context(conversation, form), status=400)
    model_before = conversation.model
    try:
        services.conversation_update_settings(conversation=conversation, **form.cleaned_data)
    except InvalidRequest as exc:  # a model that became an embedding one since the form's check
        form.add_error("model", exc.message)
        return render(request, "chat/_settings.html", _settings_context(conversation, form), status=400)
    load_error = ""
    if conversation.model != model_before:
        # A model that is not loaded starts loading now (memory allowing); the panel says why one cannot.
        load_error = model_loading.load_picked(conversation=conversation)
        _broadcast_model(conversation)  # The header's picker, in every tab, shows the new model.
    context = _settings_context(conversation, saved=True)
    return render(request, "chat/_settings.html", {**context, "load_error": load_error})


@login_required
@require_POST
def set_model(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The header's model picker: the model of the chat's next reply."""
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    form = ModelForm(request.POST, user_id=conversation.user_id)
    if not form.is_valid():
        error = " ".join(str(e) for e in form.errors["model"])
        return render(request, "chat/_model_picker.html", _picker_context(conversation, error), status=400)
    try:
        services.conversation_set_model(conversation=conversation, model=form.cleaned_data["model"])
    except InvalidRequest as exc:
        return render(
            request, "chat/_model_picker.html", _picker_context(conversation, exc.message), status=400
        )
    # Picking a model that is not loaded starts its load (memory allowing); the picker says why not.
    return HttpResponse(_broadcast_model(conversation, model_loading.load_picked(conversation=conversation)))


@login_required
@require_GET
def model_picker(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The header's picker afresh: it asks for itself while a model loads, until the model is ready."""
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    return HttpResponse(model_loading.picker_html(conversation))


def _download(body: str, *, filename: str, content_type: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_GET
def export_json(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    body = json.dumps(transfer.export_data(conversation=conversation), indent=2, ensure_ascii=False)
    name = slugify(conversation.title) or "chat"
    return _download(body, filename=f"{name}.json", content_type="application/json")


@login_required
@require_GET
def export_markdown(request: HttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    name = slugify(conversation.title) or "chat"
    body = transfer.export_markdown(conversation=conversation)
    return _download(body, filename=f"{name}.md", content_type="text/markdown; charset=utf-8")


@login_required
@require_POST
def import_json(request: HttpRequest) -> HttpResponse:
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Choose a JSON file to import.")
        return redirect("chat:index")
    upload = form.cleaned_data["file"]
    try:
        # By the size the upload declares, before reading it: a large file is never loaded into memory.
        transfer.check_import_size(upload.size)
        # At most one byte over the limit, should the declared size be wrong; import_chat refuses that.
        raw = upload.read(transfer.MAX_IMPORT_BYTES + 1)
        conversation = transfer.import_chat(user=_user(request), raw=raw)
    except InvalidRequest as exc:
        messages.error(request, exc.message)
        return redirect("chat:index")
    return redirect("chat:detail", conversation_id=conversation.pk)
