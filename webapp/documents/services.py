"""Writes: uploads (queued for reading: webapp.documents.indexing), collections and attachments."""

from __future__ import annotations

import logging
import unicodedata
from pathlib import PurePath

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from webapp.chat.models import Conversation
from webapp.core.errors import Conflict, InvalidRequest, PayloadTooLarge, RateLimited
from webapp.documents.indexing import mark_failed
from webapp.documents.models import Attachment, Collection, Document
from webapp.documents.sniffing import kind_for
from webapp.documents.tasks import extract_document

logger = logging.getLogger(__name__)

# Where a chat's upload goes when it is kept for other chats (chat_upload_keep).
CHAT_UPLOADS = "Chat uploads"


def clean_name(name: str) -> str:
    """The file's own name, without folders or control characters, at most 255 characters."""
    base = PurePath(name.replace("\\", "/")).name
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C").strip()
    if len(base) > 255:
        stem, dot, ext = base.rpartition(".")
        base = f"{stem[: 254 - len(ext)]}.{ext}" if dot and len(ext) < 16 else base[:255]
    return base or "document.txt"


def check_size(size: int) -> None:
    limit = settings.MOONCAKE_DOCUMENTS_MAX_BYTES
    if size > limit:
        raise PayloadTooLarge(
            f"The file is {size / 1048576:.1f} MiB; files up to {limit / 1048576:.1f} MiB can be attached.",
            code="file_too_large",
        )


def document_upload(
    *,
    owner: User,
    name: str,
    data: bytes,
    conversation: Conversation | None = None,
    collection: Collection | None = None,
) -> Document:
    """Store the file in the chat or collection and queue its extraction."""
    if (conversation is None) == (collection is None):
        raise InvalidRequest("A document goes into one chat or one collection.", code="invalid")
    home_owner = conversation.user_id if conversation is not None else collection.owner_id  # type: ignore[union-attr]
    if home_owner != owner.pk:
        raise InvalidRequest("That chat or collection is not yours.", code="invalid")
    name = clean_name(name)
    check_size(len(data))
    if not data:
        raise InvalidRequest(f"{name} is empty.", code="empty_file")
    kind = kind_for(name, data[:4096])
    with transaction.atomic():
        _check_backlog(owner)
        if conversation is not None:
            Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
            most = settings.MOONCAKE_DOCUMENTS_PER_CHAT
            if Document.objects.filter(conversation=conversation).count() >= most:
                raise Conflict(
                    f"A chat holds at most {most} documents; remove one first.",
                    code="too_many_documents",
                )
        document = Document.objects.create(
            owner=owner,
            conversation=conversation,
            collection=collection,
            name=name,
            kind=kind,
            size_bytes=len(data),
            data=data,
        )
    _enqueue(document)
    return document


def _check_backlog(owner: User) -> None:
    """Refuse an upload while the owner has their most documents waiting or being read: they are read a
    few at a time (webapp.documents.indexing), and a waiting document costs the queue a message now and
    then, so the backlog is bounded per user."""
    most = settings.MOONCAKE_DOCUMENTS_MAX_QUEUED_PER_USER
    busy = Document.objects.filter(
        owner=owner, state__in=(Document.State.QUEUED, Document.State.EXTRACTING)
    ).count()
    if most > 0 and busy >= most:
        raise RateLimited(
            f"You have {busy} documents waiting to be read; upload more once some are ready.",
            code="too_many_documents_waiting",
            retry_after=10,
        )


def _enqueue(document: Document) -> None:
    try:
        extract_document.delay(document.pk)
    except Exception as exc:
        logger.exception("Queuing the extraction of document %s failed", document.pk)
        mark_failed(document.pk, f"Could not queue this file for reading (is the task queue running?): {exc}")
    document.refresh_from_db(fields=["state", "error", "progress_done", "progress_total"])


def document_delete(*, document: Document) -> None:
    document.delete()


def collection_create(*, owner: User, name: str) -> Collection:
    name = " ".join(name.split())
    if not name:
        raise InvalidRequest("Give the collection a name.", param="name")
    if len(name) > 120:
        raise InvalidRequest("A collection name has at most 120 characters.", param="name")
    try:
        with transaction.atomic():
            return Collection.objects.create(owner=owner, name=name)
    except IntegrityError as exc:
        raise InvalidRequest(f"You already have a collection named {name!r}.", param="name") from exc


def collection_delete(*, collection: Collection) -> None:
    collection.delete()


def chat_uploads_collection(*, owner: User) -> Collection:
    """The owner's "Chat uploads" collection, made the first time one of their chat uploads is kept."""
    collection, _ = Collection.objects.get_or_create(owner=owner, name=CHAT_UPLOADS)
    return collection


@transaction.atomic
def chat_upload_keep(*, document: Document) -> Document:
    """Keep a file uploaded in a chat for other chats: it moves into the owner's "Chat uploads" collection
    and stays attached to its chat, which goes on reading it. Deleting that chat then leaves it in My
    documents, as any collection document."""
    chat_id = document.conversation_id
    if chat_id is None:
        return document
    collection = chat_uploads_collection(owner=document.owner)
    Document.objects.filter(pk=document.pk).update(conversation=None, collection=collection)
    document.conversation, document.collection = None, collection
    Attachment.objects.get_or_create(conversation_id=chat_id, collection=None, document=document)
    return document


def attach(
    *, conversation: Conversation, collection: Collection | None = None, document: Document | None = None
) -> Attachment:
    """Attach one of the chat owner's collections, or one of their documents, to the chat; a file uploaded
    in another chat is kept in "Chat uploads" first (chat_upload_keep), so either chat may be deleted."""
    target_owner = collection.owner_id if collection is not None else document.owner_id if document else None
    if (collection is None) == (document is None) or target_owner != conversation.user_id:
        raise InvalidRequest("Attach one of your own collections or documents.", code="invalid")
    if document is not None and document.conversation_id == conversation.pk:
        raise InvalidRequest(f"{document.name} was uploaded in this chat: it reads it already.")
    if document is not None and document.collection_id is None:
        document = chat_upload_keep(document=document)
    attachment, _ = Attachment.objects.get_or_create(
        conversation=conversation, collection=collection, document=document
    )
    return attachment


def detach(*, conversation: Conversation, attachment_id: int) -> None:
    Attachment.objects.filter(conversation=conversation, pk=attachment_id).delete()
