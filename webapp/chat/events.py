"""What the chat socket says: rendered message fragments and state changes, sent to a per-chat group."""

from __future__ import annotations

from typing import Any

from channels.layers import get_channel_layer
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from webapp.chat.models import Conversation, Message
from webapp.chat.selectors import conversation_messages


def group_name(conversation_id: int) -> str:
    return f"chat_{conversation_id}"


def message_html(message: Message, body_html: str | None = None) -> str:
    """The message fragment; `body_html` is its content already rendered (a streaming reply's cache)."""
    # body_html comes from markdown_stream, which sanitizes every piece exactly as the markdown filter does.
    body = mark_safe(body_html) if body_html is not None else None
    return render_to_string("chat/_message.html", {"message": message, "body_html": body})


def upsert(message: Message, *, nonce: str | None = None, body_html: str | None = None) -> dict[str, Any]:
    """The message's whole rendered fragment: a client that missed updates is right again after one."""
    event: dict[str, Any] = {"type": "upsert", "id": message.pk, "html": message_html(message, body_html)}
    if nonce:
        event["nonce"] = nonce
    return event


def thread(chat: Conversation, *, nonce: str | None = None) -> dict[str, Any]:
    """The whole thread on screen, after a change of branch (a new version, or one picked in any tab)."""
    html = "".join(message_html(m) for m in conversation_messages(conversation=chat))
    event: dict[str, Any] = {"type": "thread", "html": html}
    if nonce:
        event["nonce"] = nonce
    return event


def model(chat: Conversation, html: str) -> dict[str, Any]:
    """The header's model picker after the chat's model changed (in any tab)."""
    return {"type": "model", "model": chat.model, "html": html}


def model_loading(name: str, *, done: bool = False) -> dict[str, Any]:
    """The chat's model is loading for the reply asked for (done: it finished, or could not load)."""
    return {"type": "loading", "model": name, "done": done}


def conversation(chat: Conversation) -> dict[str, Any]:
    """The chat's sidebar entry, so a first message puts a new chat at the top of the list."""
    html = render_to_string("chat/_conversation_item.html", {"c": chat, "current_id": chat.pk})
    return {"type": "conversation", "id": chat.pk, "html": html}


def remove(ids: list[int]) -> dict[str, Any]:
    return {"type": "remove", "ids": ids}


def state(*, running: bool) -> dict[str, Any]:
    return {"type": "state", "running": running}


def title(text: str) -> dict[str, Any]:
    return {"type": "title", "title": text}


def error(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message}


async def broadcast(conversation_id: int, *events: dict[str, Any]) -> None:
    """Send events, in order, to every socket open on the chat."""
    layer = get_channel_layer()
    if layer is None:
        return
    for event in events:
        await layer.group_send(group_name(conversation_id), {"type": "chat.event", "payload": event})
