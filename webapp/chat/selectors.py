"""Read-side queries for chat: every lookup is scoped to its owner so other users' chats stay invisible."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import Http404

from webapp.chat.leases import reply_is_live
from webapp.chat.models import Branch, Conversation, Message
from webapp.core.errors import InvalidRequest, NotFound
from webapp.core.selectors import model_defaults
from webapp.core.site import site_settings
from webapp.serving.model_access import viewer_for_user, visible
from webapp.serving.model_states import LOADING_STATES, StateView, describe
from webapp.serving.runtime import get_runtime

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
    task: str = "generate"

    @property
    def view(self) -> StateView:
        return describe(self.state)

    @property
    def state_label(self) -> str:
        """The state in the one vocabulary every picker and the console use (webapp.serving.model_states)."""
        return self.view.label


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
    """The chat's active thread, in order. A reply still "streaming" while no replica holds the chat's lease
    lost its generator (its server stopped mid-reply): it reads as interrupted, so the page does not spin
    forever. One that some replica runs, here or elsewhere, reads as streaming."""
    live = reply_is_live(conversation)
    messages = active_path(conversation=conversation)
    for message in messages:
        if message.status == Message.Status.STREAMING and not live:
            message.status, message.finish_reason = Message.Status.STOPPED, "interrupted"
    return messages


def _branch(level: list[Message], index: int) -> Branch:
    return Branch(
        index=index + 1,
        count=len(level),
        prev_id=level[index - 1].pk if index > 0 else None,
        next_id=level[index + 1].pk if index + 1 < len(level) else None,
    )


def active_path(*, conversation: Conversation) -> list[Message]:
    """The thread on screen: from the active first message down each one's active child (the newest
    where none was chosen), each with its position among its versions."""
    children: dict[int | None, list[Message]] = defaultdict(list)
    for message in conversation.messages.order_by("id"):
        children[message.parent_id].append(message)
    path: list[Message] = []
    # Read afresh: another tab, or the action that just ran, may have moved it since `conversation` loaded.
    root = Conversation.objects.filter(pk=conversation.pk).values_list("active_root_id", flat=True).first()
    chosen, level = root, children[None]
    while level:
        index = next((i for i, m in enumerate(level) if m.pk == chosen), len(level) - 1)
        current = level[index]
        current.branch = _branch(level, index)
        current.is_leaf = not children[current.pk]
        path.append(current)
        chosen, level = current.active_child_id, children[current.pk]
    return path


def with_branch(message: Message) -> Message:
    """The message with its position among its versions and whether anything follows it (for one fragment)."""
    siblings = list(
        Message.objects.filter(conversation_id=message.conversation_id, parent_id=message.parent_id)
        .order_by("id")
        .values_list("id", flat=True)
    )
    index = siblings.index(message.pk) if message.pk in siblings else 0
    message.branch = Branch(
        index=index + 1,
        count=max(1, len(siblings)),
        prev_id=siblings[index - 1] if index > 0 else None,
        next_id=siblings[index + 1] if index + 1 < len(siblings) else None,
    )
    message.is_leaf = not Message.objects.filter(parent_id=message.pk).exists()
    return message


def message_get(*, conversation: Conversation, message_id: int, role: str | None = None) -> Message:
    """A message of this chat (of `role` when given); NotFound for any other id, someone else's included."""
    qs = Message.objects.filter(conversation=conversation, pk=message_id)
    if role is not None:
        qs = qs.filter(role=role)
    message = qs.first()
    if message is None:
        raise NotFound("That message is not in this chat.", code="not_found")
    return message


def path_to(*, message: Message | None) -> list[Message]:
    """The message and its ancestors, first message first (empty for None)."""
    if message is None:
        return []
    by_id = {m.pk: m for m in Message.objects.filter(conversation_id=message.conversation_id)}
    path: list[Message] = []
    current: Message | None = by_id.get(message.pk, message)
    while current is not None and len(path) <= len(by_id):
        path.append(current)
        current = by_id.get(current.parent_id) if current.parent_id is not None else None
    path.reverse()
    return path


def streaming_reply(*, conversation: Conversation) -> Message | None:
    """The reply some replica is generating for this chat, as last saved; None when none runs."""
    if not reply_is_live(conversation):
        return None
    return conversation.messages.filter(status=Message.Status.STREAMING).order_by("-id").first()


def draft_conversation(*, user: User) -> Conversation | None:
    """The user's newest chat without messages, reused by "New chat" so empty chats do not pile up."""
    has_messages = Exists(Message.objects.filter(conversation=OuterRef("pk")))
    return Conversation.objects.filter(user=user).exclude(has_messages).order_by("-id").first()


def prompt_messages(*, conversation: Conversation, path: list[Message]) -> list[dict[str, str]]:
    """A thread as role/content dicts for the model's chat template (failed, empty replies left out)."""
    messages: list[dict[str, str]] = []
    if conversation.system_prompt.strip():
        messages.append({"role": "system", "content": conversation.system_prompt})
    for message in path:
        if message.role == Message.Role.ASSISTANT and not message.content:
            continue
        messages.append({"role": message.role, "content": message.content})
    return messages


def prompt_through(*, conversation: Conversation, message: Message | None) -> list[dict[str, str]]:
    """The prompt of the thread that ends at `message` (None: only the system prompt)."""
    return prompt_messages(conversation=conversation, path=path_to(message=message))


def regenerate_target(*, conversation: Conversation, message_id: int | None) -> Message:
    """The message a new reply answers: a reply's parent, a user message itself; by default the thread's
    last message. InvalidRequest when there is none; NotFound for an id not in this chat."""
    if message_id is None:
        path = active_path(conversation=conversation)
        target = path[-1] if path else None
    else:
        target = message_get(conversation=conversation, message_id=message_id)
    parent = target if target is None or target.role == Message.Role.USER else target.parent
    if parent is None:
        raise InvalidRequest("There is nothing to regenerate.", code="invalid")
    return parent


def continuable_reply(*, conversation: Conversation, message_id: int) -> Message:
    """The reply Continue goes on with: the thread's last, complete at its length limit."""
    reply = message_get(conversation=conversation, message_id=message_id, role=Message.Role.ASSISTANT)
    if (
        reply.finish_reason != "length"
        or reply.status != Message.Status.COMPLETE
        or Message.objects.filter(parent=reply).exists()
    ):
        raise InvalidRequest(
            "Only the last reply, when it stopped at its length limit, can be continued.", code="invalid"
        )
    return with_branch(reply)


def available_models(*, user_id: int | None = None) -> list[ModelChoice]:
    """Models the manager knows about (those the user may use, when given), for the model switcher; empty
    when the engine is unavailable."""
    try:
        runtime = get_runtime()
        infos = runtime.manager().list()
    except Exception:  # The page must render even when the engine failed to start.
        return []
    if user_id is not None:  # a model restricted to other groups is not even named
        infos = visible(viewer_for_user(user_id=user_id), infos)
    return [ModelChoice(name=i.name, state=_state(runtime, i.name, str(i.state)), task=i.task) for i in infos]


def _state(runtime: Any, name: str, state: str) -> str:
    """A model whose load job has begun reads "loading" before the job's thread says so itself, so a
    picker drawn just after a pick never shows it as still not loaded."""
    if state == "available":
        job = runtime.jobs.active_for(name)
        if job is not None and job.kind == "load":
            return "loading"
    return state


def chat_models(*, user_id: int | None = None) -> list[ModelChoice]:
    """available_models less the embedding models (task "embed"): they cannot write a reply, so no chat
    model picker offers them."""
    return [c for c in available_models(user_id=user_id) if c.task != "embed"]


def picker_models(*, user_id: int) -> list[ModelChoice]:
    """The models for the chat header's picker (chat_models): ready ones first, then loading, then those
    that load when picked, then the unavailable, by name."""
    return sorted(chat_models(user_id=user_id), key=lambda c: (c.view.rank, c.name))


def default_model_name() -> str:
    try:
        return get_runtime().manager().default_name or ""
    except Exception:
        return ""


def model_is_loading(model: str) -> bool:
    """Whether `model` ("" = the default) is being downloaded, loaded, or restarted after a crash, now."""
    name = model or default_model_name()
    return any(choice.state in LOADING_STATES and choice.name == name for choice in available_models())
