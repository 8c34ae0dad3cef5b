"""The organised sidebar and the feedback control, as tags so the chat's views need not know of them."""

from __future__ import annotations

import asyncio
from typing import Any

from django import template
from django.contrib.auth.models import User

from webapp.chat.models import Conversation, Message
from webapp.organize import selectors
from webapp.organize.models import Feedback

register = template.Library()


@register.inclusion_tag("organize/_sidebar.html", takes_context=True)
def organize_sidebar(context: template.Context) -> dict[str, Any]:
    """The chat list: search results while a query is typed, else pinned, folders, recent, archived."""
    request = context["request"]
    user = request.user
    query = str(context.get("query") or "").strip()
    page = context.get("page")
    number = getattr(page, "number", 1)
    base: dict[str, Any] = {"request": request, "current_id": context.get("current_id"), "query": query}
    if not isinstance(user, User):
        return base
    if query:
        return {**base, "hits": selectors.search_conversations(user=user, query=query)}
    return {**base, "sidebar": selectors.sidebar(user=user, page=number)}


@register.simple_tag
def item_section(conversation: Conversation) -> str:
    """Which part of the list a chat belongs in (organize.js moves a chat the socket re-adds there)."""
    # Rendered for the socket inside the event loop, where the database is off limits: without a loaded
    # placement the answer is "" and organize.js keeps the section the list already showed the chat in.
    if not Conversation.placement.is_cached(conversation):
        return ""
    placement = getattr(conversation, "placement", None)
    if placement is None:
        return "recent"
    if placement.archived_at:
        return "archived"
    if placement.pinned_at:
        return "pinned"
    if placement.folder_id:
        return f"folder-{placement.folder_id}"
    return "recent"


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@register.simple_tag
def feedback_for(message: Message) -> Feedback | None:
    if not message.pk or message.role != Message.Role.ASSISTANT or _in_event_loop():
        # The socket renders replies inside the event loop, where queries are refused; a reply it sends
        # has just been written, so it has no feedback yet.
        return None
    return Feedback.objects.filter(message_id=message.pk).first()
