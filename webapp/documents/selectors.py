"""Reads: every lookup takes the user, and another user's ids read as missing (404), never as forbidden."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet
from django.http import Http404

from webapp.chat.models import Conversation, Message
from webapp.documents.models import Attachment, Collection, Document, DocumentChunk, MessageCitation


def _documents() -> QuerySet[Document]:
    return Document.objects.defer("data")


def document_get(*, user: User, document_id: int) -> Document:
    document = _documents().filter(owner=user, pk=document_id).first()
    if document is None:
        raise Http404("No such document")
    return document


def document_with_data(*, user: User, document_id: int) -> Document:
    document = Document.objects.filter(owner=user, pk=document_id).first()
    if document is None:
        raise Http404("No such document")
    return document


def collection_get(*, user: User, collection_id: int) -> Collection:
    collection = Collection.objects.filter(owner=user, pk=collection_id).first()
    if collection is None:
        raise Http404("No such collection")
    return collection


def user_collections(*, user: User) -> list[Collection]:
    """The user's collections with their documents (without their bytes)."""
    return list(
        Collection.objects.filter(owner=user).prefetch_related(
            Prefetch("documents", queryset=_documents().order_by("name", "id"))
        )
    )


def chat_uploads(*, user: User) -> list[Document]:
    """Files the user uploaded in their chats (not yet kept in a collection), newest chat first: My
    documents lists them with their chat."""
    return list(
        _documents()
        .filter(owner=user, conversation__isnull=False)
        .select_related("conversation")
        .order_by("-conversation__updated_at", "conversation_id", "name", "id")
    )


SEARCH_LIMIT = 50


def document_search(*, user: User, query: str) -> list[Document]:
    """The user's documents (collections and chat uploads) whose name or text holds every word of
    `query`, by name; at most SEARCH_LIMIT. Empty for a blank query."""
    words = query.split()[:8]
    if not words:
        return []
    qs = _documents().filter(owner=user)
    for word in words:
        in_text = DocumentChunk.objects.filter(document=OuterRef("pk"), text__icontains=word)
        qs = qs.filter(Q(name__icontains=word) | Exists(in_text))
    return list(qs.select_related("collection", "conversation").order_by("name", "id")[:SEARCH_LIMIT])


def chat_documents(*, conversation: Conversation) -> list[Document]:
    """Documents uploaded into the chat itself."""
    return list(_documents().filter(conversation=conversation, owner_id=conversation.user_id))


def chat_attachments(*, conversation: Conversation) -> list[Attachment]:
    """Collections and collection documents attached to the chat."""
    return list(
        Attachment.objects.filter(conversation=conversation)
        .filter(Q(collection__owner_id=conversation.user_id) | Q(document__owner_id=conversation.user_id))
        .select_related("collection")
        .prefetch_related(Prefetch("document", queryset=_documents()))
    )


def context_documents(*, conversation: Conversation) -> QuerySet[Document]:
    """Every document a reply in this chat may read: its uploads, attached documents, attached
    collections' documents; only ever the chat owner's own."""
    attached = Q(conversation=conversation) | Q(attachment__conversation=conversation)
    attached |= Q(collection__attachment__conversation=conversation)
    ids = Document.objects.filter(attached, owner_id=conversation.user_id).values("pk")
    return _documents().filter(pk__in=ids).order_by("created_at", "id")


def has_context_documents(*, conversation: Conversation) -> bool:
    return context_documents(conversation=conversation).exists()


def message_citations(*, user: User, message_id: int) -> list[MessageCitation]:
    if not Message.objects.filter(pk=message_id, conversation__user=user).exists():
        raise Http404("No such message")
    return list(MessageCitation.objects.filter(message_id=message_id))


def conversation_citations(*, conversation_id: int) -> dict[int, list[MessageCitation]]:
    """Every citation of a chat's replies by message id (one query for a whole page)."""
    by_message: dict[int, list[MessageCitation]] = {}
    for citation in MessageCitation.objects.filter(message__conversation_id=conversation_id):
        by_message.setdefault(citation.message_id, []).append(citation)
    return by_message


def recent_conversations(*, user: User, limit: int = 30) -> list[Conversation]:
    """Chats to offer as attachment targets: the user's newest."""
    return list(Conversation.objects.filter(user=user).order_by("-updated_at", "-id")[:limit])
