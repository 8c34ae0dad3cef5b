"""Renaming a chat: in its header (chat/_title.html) and in place in the chat list (the ⋯ menu's Rename).

Only the owner renames: another user's chat is a 404 (selectors.conversation_get). Every tab open on the
chat hears of the new title over its socket, so its header, list and window title follow.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve
from django.views.decorators.http import require_GET, require_http_methods

from webapp.chat import events, selectors, services
from webapp.chat.forms import RenameForm
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest

# What a refused title sends back into the field at most: enough to fix a long one, never a huge echo.
ECHO_CHARS = 4 * services.MAX_TITLE_CHARS


def _user(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user


def _current_id(request: HttpRequest) -> int | None:
    """The chat on the page the request came from (htmx sends its URL): its list entry stays marked."""
    try:
        match = resolve(urlsplit(request.headers.get("HX-Current-URL", "")).path)
    except Resolver404:
        return None
    return int(match.kwargs["conversation_id"]) if match.view_name == "chat:detail" else None


def _list_field(
    request: HttpRequest, conversation: Conversation, *, value: str | None = None, error: str = ""
) -> HttpResponse:
    context = {
        "c": conversation,
        "current_id": _current_id(request),
        "value": conversation.title if value is None else value[:ECHO_CHARS],
        "max_title": services.MAX_TITLE_CHARS,
        "error": error,
    }
    return render(request, "chat/_conversation_rename.html", context, status=400 if error else 200)


def _list_entry(request: HttpRequest, conversation: Conversation) -> HttpResponse:
    context = {"c": conversation, "current_id": _current_id(request)}
    return render(request, "chat/_conversation_item.html", context)


def _rename(conversation: Conversation, data: QueryDict) -> str:
    """Rename from the posted form; the reason it was refused, or "" when renamed."""
    form = RenameForm(data)
    if not form.is_valid():
        return " ".join(str(e) for e in form.errors["title"])
    try:
        services.conversation_rename(conversation=conversation, title=form.cleaned_data["title"])
    except InvalidRequest as exc:
        return exc.message
    return ""


@login_required
@require_http_methods(["GET", "POST"])
def rename(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """GET: the list entry as a title field. POST: rename; the answer fits where the form was (the
    header's field, or the list entry), with the reason beside the field when the title is refused."""
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    if request.method == "GET":
        return _list_field(request, conversation)
    in_list = request.POST.get("place") == "list"
    error = _rename(conversation, request.POST)
    if not request.headers.get("HX-Request"):  # The form posted without its script: back to the page.
        if error:
            messages.error(request, error)
        return redirect("chat:detail", conversation_id=conversation.pk)
    if error and in_list:  # what was typed stays in the field, to be fixed
        return _list_field(request, conversation, value=request.POST.get("title", ""), error=error)
    if error:  # the header's field gets the stored title back, with the reason beside it
        context = {"conversation": conversation, "title_error": error}
        return render(request, "chat/_title.html", context, status=400)
    # Every tab open on the chat shows the new title at once (header, list, window title).
    async_to_sync(events.broadcast)(conversation.pk, events.title(conversation.title))
    if in_list:
        return _list_entry(request, conversation)
    return render(request, "chat/_title.html", {"conversation": conversation, "oob_item": True})


@login_required
@require_GET
def list_entry(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The chat's list entry as it stands: what cancelling a rename in the list puts back."""
    conversation = selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    return _list_entry(request, conversation)
