"""From a reply's prompt to its citations, without touching the chat's code.

The admission hook (webapp.documents.hooks) remembers, per chat, the passages it put into the prompt. The
chat then creates the reply's assistant Message in this same process (a send holds the chat's reservation
from admission to that moment); post_save on Message turns what was remembered into MessageCitation rows
and leaves them on the instance, so the reply's fragments render them without a query (which its async
caller could not make).
"""

from __future__ import annotations

import threading
from typing import Any

from django.db.models.signals import post_save

from webapp.chat.models import Message
from webapp.documents.context import Passage
from webapp.documents.models import Document, MessageCitation

# The quote a citation keeps: a chunk is at most MOONCAKE_DOCUMENTS_CHUNK_CHARS, this bounds odd settings.
MAX_QUOTE_CHARS = 4000

_lock = threading.Lock()
_pending: dict[int, list[Passage]] = {}


def remember(conversation_id: int, passages: list[Passage]) -> None:
    with _lock:
        if passages:
            _pending[conversation_id] = passages
        else:
            _pending.pop(conversation_id, None)


def take(conversation_id: int) -> list[Passage]:
    with _lock:
        return _pending.pop(conversation_id, [])


def connect() -> None:
    post_save.connect(_on_message_saved, sender=Message, dispatch_uid="documents.citations")


def _on_message_saved(sender: type[Message], instance: Message, created: bool, **kwargs: Any) -> None:
    if not created or instance.role != Message.Role.ASSISTANT:
        return
    passages = take(instance.conversation_id)
    if not passages:
        instance.document_citations = []  # type: ignore[attr-defined]
        return
    # A document deleted since the prompt was built keeps its citation, unlinked.
    alive = set(
        Document.objects.filter(pk__in={p.document_id for p in passages}).values_list("pk", flat=True)
    )
    rows = [
        MessageCitation(
            message=instance,
            document_id=p.document_id if p.document_id in alive else None,
            document_name=p.document_name,
            page=p.page,
            heading=p.heading,
            quote=p.text[:MAX_QUOTE_CHARS],
            rank=rank,
            whole_document=p.whole_document,
        )
        for rank, p in enumerate(passages, start=1)
    ]
    instance.document_citations = MessageCitation.objects.bulk_create(rows)  # type: ignore[attr-defined]
