"""Template tags for the chat's templates: a reply's citations, and the file picker's accepted types."""

from __future__ import annotations

from typing import Any

from django import template
from django.core.exceptions import SynchronousOnlyOperation

from webapp.chat.models import Message
from webapp.documents.models import MessageCitation
from webapp.documents.selectors import conversation_citations
from webapp.documents.sniffing import ACCEPT

register = template.Library()


@register.simple_tag
def documents_accept() -> str:
    return ACCEPT


@register.inclusion_tag("documents/_citations.html", takes_context=True)
def message_citations(context: template.Context, message: Message) -> dict[str, Any]:
    return {"citations": _citations(context, message)}


def _citations(context: template.Context, message: Message) -> list[MessageCitation]:
    # A reply created in this process carries its citations (webapp.documents.citations): its fragments
    # are rendered on the event loop, where no query may run.
    carried: list[MessageCitation] | None = getattr(message, "document_citations", None)
    if carried is not None:
        return carried
    if message.pk is None:
        return []
    request = context.get("request")
    try:
        if request is None:
            return conversation_citations(conversation_id=message.conversation_id).get(message.pk, [])
        # A page renders many messages: one query for the whole chat, kept on the request.
        cache: dict[int, dict[int, list[MessageCitation]]] = request.__dict__.setdefault("_doc_citations", {})
        if message.conversation_id not in cache:
            cache[message.conversation_id] = conversation_citations(conversation_id=message.conversation_id)
        return cache[message.conversation_id].get(message.pk, [])
    except SynchronousOnlyOperation:
        return []
