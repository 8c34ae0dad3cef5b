"""Read-side queries for chat: every lookup is scoped to its owner so other users' chats stay invisible."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import Http404

from webapp.chat.leases import reply_is_live
from webapp.chat.models import Conversation, Message
from webapp.core.runtime import get_runtime
from webapp.core.selectors import model_defaults
from webapp.core.site import site_settings

PAGE_SIZE = 30


@dataclass(frozen=True, slots=True)
class ChatDefaults:
    """Parameters a new chat starts with; settings.MOONCAKE_CHAT_DEFAULTS overrides any of them."""

    model: str = ""
    system_prompt: str = ""
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512


@dataclass(frozen=True, slots=True)
class ModelChoice:
    name: str
    state: str


def chat_defaults() -> ChatDefaults:
    """Built-in defaults, then settings.MOONCAKE_CHAT_DEFAULTS, then what an admin set in the console (the
    site's default system prompt, then the default model's own defaults)."""
    values: dict[str, Any] = dict(getattr(settings, "MOONCAKE_CHAT_DEFAULTS", {}) or {})
    site_prompt = site_settings().default_system_prompt
    if site_prompt:
        values["system_prompt"] = site_prompt
    values.update(_console_defaults(values.get("model") or default_model_name()))
    known = {k: v for k, v in values.items() if k in ChatDefaults.__dataclass_fields__}
    return ChatDefaults(**known)


def _console_defaults(model: str) -> dict[str, Any]:
    """The console's sampling defaults and system prompt for the model (core owns the layering)."""
    defaults = model_defaults(model)
    values: dict[str, Any] = dict(defaults["sampling"])
    if defaults["system_prompt"]:
        values["system_prompt"] = defaults["system_prompt"]
    return values


def conversation_get(*, user: User, conversation_id: int) -> Conversation:
    """The user's own conversation, or Http404 (never 403, so ids of other users' chats do not leak)."""
    conversation = Conversation.objects.filter(user=user, pk=conversation_id).first()
    if conversation is None:
        raise Http404("No such conversation")
    return conversation


def conversation_search(*, user: User, query: str = "") -> QuerySet[Conversation]:
    """The user's chats that have messages, newest first, matching the query in title or content."""
    has_messages = Exists(Message.objects.filter(conversation=OuterRef("pk")))
    qs = Conversation.objects.filter(user=user).filter(has_messages)
    query = query.strip()
    if query:
        in_content = Exists(Message.objects.filter(conversation=OuterRef("pk"), content__icontains=query))
        qs = qs.filter(Q(title__icontains=query) | in_content)
    return qs.order_by("-updated_at", "-id")


def conversation_page(*, user: User, query: str = "", page: int = 1) -> Page[Conversation]:
    paginator = Paginator(conversation_search(user=user, query=query), PAGE_SIZE)
    return paginator.get_page(page)


def conversation_messages(*, conversation: Conversation) -> list[Message]:
    """The chat in order. A reply still "streaming" while no replica holds the chat's lease lost its
    generator (its server stopped mid-reply): it reads as interrupted, so the page does not spin forever.
    One that some replica runs, here or elsewhere, reads as streaming."""
    live = reply_is_live(conversation)
    messages = list(conversation.messages.order_by("id"))
    for message in messages:
        if message.status == Message.Status.STREAMING and not live:
            message.status, message.finish_reason = Message.Status.STOPPED, "interrupted"
    return messages


def streaming_reply(*, conversation: Conversation) -> Message | None:
    """The reply some replica is generating for this chat, as last saved; None when none runs."""
    if not reply_is_live(conversation):
        return None
    return conversation.messages.filter(status=Message.Status.STREAMING).order_by("-id").first()


def draft_conversation(*, user: User) -> Conversation | None:
    """The user's newest chat without messages, reused by "New chat" so empty chats do not pile up."""
    has_messages = Exists(Message.objects.filter(conversation=OuterRef("pk")))
    return Conversation.objects.filter(user=user).exclude(has_messages).order_by("-id").first()


def prompt_messages(*, conversation: Conversation, before_id: int | None = None) -> list[dict[str, str]]:
    """The chat as role/content dicts for the model's chat template (failed, empty replies left out)."""
    messages: list[dict[str, str]] = []
    if conversation.system_prompt.strip():
        messages.append({"role": "system", "content": conversation.system_prompt})
    qs = conversation.messages.order_by("id")
    if before_id is not None:
        qs = qs.filter(id__lt=before_id)
    for message in qs:
        if message.role == Message.Role.ASSISTANT and not message.content:
            continue
        messages.append({"role": message.role, "content": message.content})
    return messages


def available_models() -> list[ModelChoice]:
    """Models the manager knows about, for the model switcher; empty when the engine is unavailable."""
    try:
        infos = get_runtime().manager().list()
    except Exception:  # The page must render even when the engine failed to start.
        return []
    return [ModelChoice(name=info.name, state=str(info.state)) for info in infos]


def default_model_name() -> str:
    try:
        return get_runtime().manager().default_name or ""
    except Exception:
        return ""


def model_is_loading(model: str) -> bool:
    """Whether `model` ("" = the default) is being downloaded, loaded, or restarted after a crash, now."""
    name = model or default_model_name()
    busy = ("downloading", "loading", "restarting")
    return any(choice.state in busy and choice.name == name for choice in available_models())
