"""Thin views for organising chats, share links and reply feedback: forms parse, services act.

Every sidebar action answers the re-rendered list for htmx (the form's error beside its field, with a 400),
or a redirect back to the chat for a plain form post.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.chat import selectors as chat_selectors
from webapp.core.errors import InvalidRequest
from webapp.organize import selectors, services
from webapp.organize.forms import FeedbackForm, FlagForm, FolderForm, MoveForm

_CHAT_PATH = re.compile(r"/chat/(\d+)/")


def _user(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user


def _current_id(request: HttpRequest) -> int | None:
    """The chat on screen, so the re-rendered list marks it; htmx names the page's URL."""
    match = _CHAT_PATH.search(request.headers.get("HX-Current-URL", ""))
    return int(match.group(1)) if match else None


def _form_error(form: Any) -> str:
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


def sidebar_context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    page = request.GET.get("page", "1")
    data = selectors.sidebar(user=_user(request), page=int(page) if page.isdigit() else 1)
    return {"sidebar": data, "current_id": _current_id(request), "query": "", **extra}


def _sidebar(
    request: HttpRequest, *, error: str = "", error_for: str = "", status: int = 200
) -> HttpResponse:
    if not request.headers.get("HX-Request"):
        if error:
            messages.error(request, error)
        current = _current_id(request) or request.POST.get("current", "")
        return (
            redirect("chat:detail", conversation_id=current)
            if str(current).isdigit()
            else redirect("chat:index")
        )
    context = sidebar_context(request, error=error, error_for=error_for)
    return render(request, "organize/_sidebar.html", context, status=status)


@login_required
@require_GET
def sidebar_list(request: HttpRequest) -> HttpResponse:
    return render(request, "organize/_sidebar.html", sidebar_context(request))


@login_required
@require_POST
def folder_create(request: HttpRequest) -> HttpResponse:
    form = FolderForm(request.POST)
    if not form.is_valid():
        return _sidebar(request, error=_form_error(form), error_for="new", status=400)
    try:
        services.folder_create(user=_user(request), name=form.cleaned_data["name"])
    except InvalidRequest as exc:
        return _sidebar(request, error=exc.message, error_for="new", status=400)
    return _sidebar(request)


@login_required
@require_POST
def folder_rename(request: HttpRequest, folder_id: int) -> HttpResponse:
    folder = selectors.folder_get(user=_user(request), folder_id=folder_id)
    form = FolderForm(request.POST)
    if not form.is_valid():
        return _sidebar(request, error=_form_error(form), error_for=str(folder.pk), status=400)
    try:
        services.folder_rename(folder=folder, name=form.cleaned_data["name"])
    except InvalidRequest as exc:
        return _sidebar(request, error=exc.message, error_for=str(folder.pk), status=400)
    return _sidebar(request)


@login_required
@require_POST
def folder_delete(request: HttpRequest, folder_id: int) -> HttpResponse:
    services.folder_delete(folder=selectors.folder_get(user=_user(request), folder_id=folder_id))
    return _sidebar(request)


@login_required
@require_GET
def item_menu(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """A chat's actions, fetched when its menu opens, so the list itself needs no folder queries."""
    user = _user(request)
    conversation = chat_selectors.conversation_get(user=user, conversation_id=conversation_id)
    placement = getattr(conversation, "placement", None)
    context = {"c": conversation, "placement": placement, "folders": selectors.folders_of(user=user)}
    return render(request, "organize/_item_menu.html", context)


def _flag(request: HttpRequest, conversation_id: int, action: Any) -> HttpResponse:
    conversation = chat_selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    form = FlagForm(request.POST)
    if not form.is_valid():
        return _sidebar(request, error="Say whether to turn it on or off.", status=400)
    action(conversation, form.cleaned_data["on"])
    return _sidebar(request)


@login_required
@require_POST
def pin(request: HttpRequest, conversation_id: int) -> HttpResponse:
    return _flag(request, conversation_id, lambda c, on: services.conversation_pin(conversation=c, pinned=on))


@login_required
@require_POST
def archive(request: HttpRequest, conversation_id: int) -> HttpResponse:
    return _flag(
        request, conversation_id, lambda c, on: services.conversation_archive(conversation=c, archived=on)
    )


@login_required
@require_POST
def move(request: HttpRequest, conversation_id: int) -> HttpResponse:
    user = _user(request)
    conversation = chat_selectors.conversation_get(user=user, conversation_id=conversation_id)
    form = MoveForm(request.POST)
    if not form.is_valid():
        return _sidebar(request, error=_form_error(form), status=400)
    folder_id = form.cleaned_data["folder"]
    # Another user's folder id is a 404, exactly like an id that does not exist.
    folder = selectors.folder_get(user=user, folder_id=folder_id) if folder_id else None
    services.conversation_move(conversation=conversation, folder=folder)
    return _sidebar(request)


@login_required
@require_http_methods(["GET", "POST"])
def shares(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The chat's active links; POST makes a new one, whose address is shown this once."""
    conversation = chat_selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    context: dict[str, Any] = {"conversation": conversation}
    status = 200
    if request.method == "POST":
        try:
            share, token = services.share_create(conversation=conversation)
            context["new_url"] = request.build_absolute_uri(f"/chat/shared/{token}/")
            context["new_share"] = share
        except InvalidRequest as exc:
            context["error"], status = exc.message, 400
    context["shares"] = selectors.active_shares(conversation=conversation)
    return render(request, "organize/shares.html", context, status=status)


@login_required
@require_POST
def share_revoke(request: HttpRequest, share_id: int) -> HttpResponse:
    share = selectors.share_get(user=_user(request), share_id=share_id)
    services.share_revoke(share=share)
    messages.success(request, "Link revoked: it no longer opens the chat.")
    return redirect("organize:shares", conversation_id=share.conversation_id)


@login_required
@require_GET
def shared(request: HttpRequest, token: str) -> HttpResponse:
    """A shared chat, read-only, for any logged-in user of the site; anonymous visitors log in first."""
    share = selectors.share_by_token(token=token)
    conversation = share.conversation
    context = {
        "conversation": conversation,
        "messages_list": chat_selectors.conversation_messages(conversation=conversation),
        "is_owner": conversation.user_id == request.user.pk,
        "token": token,
    }
    response = render(request, "organize/shared.html", context)
    # The token is in the URL: links out must not carry it. "same-origin", not "no-referrer": under that the
    # browser sends "Origin: null" with the page's own form (Continue in a new chat), which CSRF refuses.
    response["Referrer-Policy"] = "same-origin"
    response["Cache-Control"] = "private, no-store"
    return response


@login_required
@require_POST
def shared_continue(request: HttpRequest, token: str) -> HttpResponse:
    """Continue in a new chat: a copy of the shared thread becomes one of the viewer's chats, and opens."""
    share = selectors.share_by_token(token=token)
    try:
        conversation = services.share_continue(share=share, user=_user(request))
    except InvalidRequest as exc:
        messages.error(request, exc.message)
        return redirect("organize:shared", token=token)
    return redirect("chat:detail", conversation_id=conversation.pk)


@login_required
@require_POST
def feedback(request: HttpRequest, message_id: int) -> HttpResponse:
    user = _user(request)
    message = selectors.message_get(user=user, message_id=message_id)
    form = FeedbackForm(request.POST)
    context: dict[str, Any] = {"message": message}
    if not form.is_valid():
        context["feedback_error"] = _form_error(form)
        return render(request, "organize/_feedback.html", context, status=400)
    # A thumb click sends no comment field: it keeps the stored comment (and a second click takes it back).
    comment = form.cleaned_data["comment"] if "comment" in request.POST else None
    try:
        result = services.feedback_set(
            user=user, message=message, rating=form.cleaned_data["rating"], comment=comment
        )
    except InvalidRequest as exc:
        context["feedback_error"] = exc.message
        return render(request, "organize/_feedback.html", context, status=400)
    context["feedback_saved"] = comment is not None
    context["open_comment"] = result is not None and comment is None and not result.comment
    if not request.headers.get("HX-Request"):
        return redirect("chat:detail", conversation_id=message.conversation_id)
    return render(request, "organize/_feedback.html", context)
