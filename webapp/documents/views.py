"""Documents pages and htmx fragments. Thin: forms validate, services act, selectors read.

Other users' ids (documents, collections, chats, messages) answer 404 everywhere, as the chat's do.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.chat import selectors as chat_selectors
from webapp.core.body_limits import declared_length
from webapp.core.errors import InvalidRequest, MooncakeError, PayloadTooLarge
from webapp.documents import selectors, services
from webapp.documents.forms import AttachCollectionForm, AttachToChatForm, CollectionForm
from webapp.documents.sniffing import ACCEPT

# Room for the multipart framing and the CSRF field around one file.
FORM_OVERHEAD_BYTES = 64 * 1024


def _user(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user


def _read(request: HttpRequest, upload: UploadedFile) -> bytes:
    services.check_size(upload.size or 0)
    return upload.read()


def _body_too_large(request: HttpRequest, files: int = 1) -> PayloadTooLarge | None:
    """Refuse by Content-Length before the multipart body is parsed."""
    length = declared_length(request)
    limit = settings.MOONCAKE_DOCUMENTS_MAX_BYTES * files + FORM_OVERHEAD_BYTES
    if length is not None and length > limit:
        mib = settings.MOONCAKE_DOCUMENTS_MAX_BYTES / 1048576
        return PayloadTooLarge(f"That is too large: files up to {mib:.1f} MiB can be attached.")
    return None


def _error_chip(request: HttpRequest, name: str, error: MooncakeError) -> HttpResponse:
    context = {"name": name, "message": error.message}
    return render(request, "documents/_upload_error.html", context, status=error.status)


# ---- in a chat -----------------------------------------------------------------------------------------


def _tray(request: HttpRequest, conversation_id: int, status: int = 200) -> HttpResponse:
    user = _user(request)
    conversation = chat_selectors.conversation_get(user=user, conversation_id=conversation_id)
    attachments = selectors.chat_attachments(conversation=conversation)
    attached = {a.collection_id for a in attachments if a.collection_id}
    context = {
        "conversation": conversation,
        "documents": selectors.chat_documents(conversation=conversation),
        "attachments": attachments,
        "collections": [c for c in selectors.user_collections(user=user) if c.pk not in attached],
        "accept": ACCEPT,
    }
    return render(request, "documents/_tray.html", context, status=status)


@login_required
@require_GET
def chat_tray(request: HttpRequest, conversation_id: int) -> HttpResponse:
    return _tray(request, conversation_id)


@login_required
@require_POST
def chat_upload(request: HttpRequest, conversation_id: int) -> HttpResponse:
    user = _user(request)
    conversation = chat_selectors.conversation_get(user=user, conversation_id=conversation_id)
    too_large = _body_too_large(request)
    if too_large is not None:
        return _error_chip(request, "", too_large)
    upload = request.FILES.get("file")
    if upload is None:
        return _error_chip(request, "", InvalidRequest("Choose a file to attach."))
    try:
        document = services.document_upload(
            owner=user, name=upload.name or "", data=_read(request, upload), conversation=conversation
        )
    except MooncakeError as exc:
        return _error_chip(request, services.clean_name(upload.name or ""), exc)
    return render(request, "documents/_chip.html", {"document": document, "removable": True}, status=201)


@login_required
@require_POST
def chat_attach(request: HttpRequest, conversation_id: int) -> HttpResponse:
    user = _user(request)
    conversation = chat_selectors.conversation_get(user=user, conversation_id=conversation_id)
    form = AttachCollectionForm(request.POST)
    if not form.is_valid():
        return _tray(request, conversation_id, status=400)
    collection = selectors.collection_get(user=user, collection_id=form.cleaned_data["collection"])
    services.attach(conversation=conversation, collection=collection)
    return _tray(request, conversation_id)


@login_required
@require_POST
def chat_detach(request: HttpRequest, conversation_id: int, attachment_id: int) -> HttpResponse:
    conversation = chat_selectors.conversation_get(user=_user(request), conversation_id=conversation_id)
    services.detach(conversation=conversation, attachment_id=attachment_id)
    return _tray(request, conversation_id)


@login_required
@require_GET
def message_citations(request: HttpRequest, message_id: int) -> HttpResponse:
    citations = selectors.message_citations(user=_user(request), message_id=message_id)
    return render(request, "documents/_citations.html", {"citations": citations, "message_id": message_id})


# ---- one document --------------------------------------------------------------------------------------


@login_required
@require_GET
def document_status(request: HttpRequest, document_id: int) -> HttpResponse:
    document = selectors.document_get(user=_user(request), document_id=document_id)
    removable = request.GET.get("removable") == "1"
    return render(request, "documents/_chip.html", {"document": document, "removable": removable})


@login_required
@require_GET
def document_download(request: HttpRequest, document_id: int) -> HttpResponse:
    document = selectors.document_with_data(user=_user(request), document_id=document_id)
    # Always a download, never rendered: an uploaded HTML file must not run as this site's page.
    response = HttpResponse(bytes(document.data), content_type="application/octet-stream")
    response["Content-Disposition"] = _disposition(document.name)
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _disposition(name: str) -> str:
    from urllib.parse import quote

    ascii_name = name.encode("ascii", "replace").decode().replace('"', "'").replace("?", "_")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"


@login_required
@require_POST
def document_delete(request: HttpRequest, document_id: int) -> HttpResponse:
    document = selectors.document_get(user=_user(request), document_id=document_id)
    services.document_delete(document=document)
    if request.headers.get("HX-Request"):
        return HttpResponse("")
    messages.success(request, f"Deleted {document.name}.")
    return redirect("documents:index")


@login_required
@require_POST
def document_attach(request: HttpRequest, document_id: int) -> HttpResponse:
    user = _user(request)
    document = selectors.document_get(user=user, document_id=document_id)
    return _attach_to_chat(request, user, document=document)


# ---- collections ---------------------------------------------------------------------------------------


@login_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    query = request.GET.get("q", "")[:200].strip()
    context = {
        "collections": selectors.user_collections(user=user),
        "uploads": selectors.chat_uploads(user=user),
        "query": query,
        "results": selectors.document_search(user=user, query=query),
        "chats": selectors.recent_conversations(user=user),
        "accept": ACCEPT,
        "max_mib": settings.MOONCAKE_DOCUMENTS_MAX_BYTES / 1048576,
        "max_pages": settings.MOONCAKE_DOCUMENTS_MAX_PAGES,
    }
    return render(request, "documents/index.html", context)


@login_required
@require_POST
def collection_new(request: HttpRequest) -> HttpResponse:
    form = CollectionForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(str(e) for e in form.errors["name"]))
        return redirect("documents:index")
    try:
        collection = services.collection_create(owner=_user(request), name=form.cleaned_data["name"])
    except InvalidRequest as exc:
        messages.error(request, exc.message)
        return redirect("documents:index")
    messages.success(request, f"Created the collection {collection.name}.")
    return redirect("documents:index")


@login_required
@require_POST
def collection_delete(request: HttpRequest, collection_id: int) -> HttpResponse:
    collection = selectors.collection_get(user=_user(request), collection_id=collection_id)
    services.collection_delete(collection=collection)
    messages.success(request, f"Deleted the collection {collection.name} and its documents.")
    return redirect("documents:index")


@login_required
@require_POST
def collection_upload(request: HttpRequest, collection_id: int) -> HttpResponse:
    user = _user(request)
    collection = selectors.collection_get(user=user, collection_id=collection_id)
    too_large = _body_too_large(request, files=10)
    uploads = [] if too_large else request.FILES.getlist("file")[:10]
    if too_large:
        messages.error(request, too_large.message)
    elif not uploads:
        messages.error(request, "Choose one or more files to upload.")
    for upload in uploads:
        try:
            services.document_upload(
                owner=user, name=upload.name or "", data=_read(request, upload), collection=collection
            )
        except MooncakeError as exc:
            messages.error(request, f"{services.clean_name(upload.name or '')}: {exc.message}")
        else:
            messages.success(
                request, f"Uploaded {services.clean_name(upload.name or '')} to {collection.name}."
            )
    return redirect("documents:index")


@login_required
@require_POST
def collection_attach(request: HttpRequest, collection_id: int) -> HttpResponse:
    user = _user(request)
    collection = selectors.collection_get(user=user, collection_id=collection_id)
    return _attach_to_chat(request, user, collection=collection)


def _attach_to_chat(request: HttpRequest, user: User, **target: object) -> HttpResponse:
    form = AttachToChatForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a chat to attach to.")
        return redirect("documents:index")
    conversation = chat_selectors.conversation_get(
        user=user, conversation_id=form.cleaned_data["conversation"]
    )
    try:
        services.attach(conversation=conversation, **target)  # type: ignore[arg-type]
    except InvalidRequest as exc:
        messages.error(request, exc.message)
        return redirect("documents:index")
    messages.success(request, f"Attached to the chat {conversation.title}.")
    return redirect("documents:index")
