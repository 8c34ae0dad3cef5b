"""Write-side actions for chat. Keyword-only, typed, each one atomic."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from webapp.chat import leases
from webapp.chat.models import Conversation, Message
from webapp.chat.selectors import available_models, chat_defaults, draft_conversation
from webapp.core.errors import InvalidRequest, NotFound
from webapp.serving.sampling import CHAT_REPLY_TOKENS, TEMPERATURE, TOP_P

MAX_MESSAGE_CHARS = 32_000
MAX_TITLE_CHARS = 200
TITLE_BLANK = "The title cannot be blank."
TITLE_TOO_LONG = f"The title is longer than {MAX_TITLE_CHARS} characters."
EMBEDDING_REFUSAL = "{model} is an embedding model: it cannot chat. Choose a chat model."


def _clean_content(content: str) -> str:
    content = content.strip()
    if not content:
        raise InvalidRequest("Message is empty.", code="invalid")
    if len(content) > MAX_MESSAGE_CHARS:
        raise InvalidRequest(f"Message is longer than {MAX_MESSAGE_CHARS} characters.", code="invalid")
    return content


def provisional_title(text: str) -> str:
    """First words of the first message, shown until the model has written a title."""
    words = " ".join(text.split()[:8])
    return (words[:60] + "…") if len(words) > 60 else (words or "New chat")


def conversation_create(*, user: User, title: str = "New chat") -> Conversation:
    # The user's own defaults (their settings page, webapp.preferences) go over the server's.
    from webapp.preferences.selectors import defaults_for

    defaults = defaults_for(user=user, base=chat_defaults())
    return Conversation.objects.create(
        user=user,
        title=title[:MAX_TITLE_CHARS],
        model=defaults.model,
        system_prompt=defaults.system_prompt,
        temperature=defaults.temperature,
        top_p=defaults.top_p,
        max_tokens=defaults.max_tokens,
    )


def conversation_new(*, user: User) -> Conversation:
    """A fresh chat for "New chat", reusing the user's empty one if there is one."""
    return draft_conversation(user=user) or conversation_create(user=user)


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    """The owner's own title: the model's title job never overwrites it. Refused when blank or too long
    (cutting it short would store a title nobody typed)."""
    title = " ".join(title.split())
    if not title:
        raise InvalidRequest(TITLE_BLANK, param="title", code="invalid")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidRequest(TITLE_TOO_LONG, param="title", code="invalid")
    conversation.title = title
    conversation.title_is_custom = True
    conversation.save(update_fields=["title", "title_is_custom", "updated_at"])
    return conversation


def conversation_set_generated_title(*, conversation_id: int, title: str) -> bool:
    """Store a model-written title unless the user renamed the chat meanwhile; True when stored."""
    title = " ".join(title.split())[:MAX_TITLE_CHARS]
    if not title:
        return False
    # update() leaves updated_at alone: a title should not move the chat to the top of the list.
    changed = Conversation.objects.filter(pk=conversation_id, title_is_custom=False).update(title=title)
    return changed == 1


def conversation_delete(*, conversation: Conversation) -> None:
    conversation.delete()


def _check_chat_model(*, conversation: Conversation, model: str) -> None:
    """Refuse an embedding model (task "embed"): it cannot write a reply. The forms refuse it first."""
    embedding = {c.name for c in available_models(user_id=conversation.user_id) if c.task == "embed"}
    if model and model in embedding:
        raise InvalidRequest(EMBEDDING_REFUSAL.format(model=model), param="model", code="invalid")


def conversation_update_settings(
    *,
    conversation: Conversation,
    system_prompt: str,
    model: str | None,
    temperature: float,
    top_p: float,
    max_tokens: int,
) -> Conversation:
    """Save the chat's settings; `model` None leaves the model as it is."""
    TEMPERATURE.check("Temperature", temperature)
    TOP_P.check("top_p", top_p)
    CHAT_REPLY_TOKENS.check("Max tokens", max_tokens)
    _check_chat_model(conversation=conversation, model=(model or "").strip())
    conversation.system_prompt = system_prompt.strip()
    if model is not None:
        conversation.model = model.strip()
    conversation.temperature = temperature
    conversation.top_p = top_p
    conversation.max_tokens = max_tokens
    conversation.save()
    return conversation


def conversation_set_model(*, conversation: Conversation, model: str) -> Conversation:
    """The model the chat's next reply uses ("" = the server's default); earlier replies keep theirs."""
    _check_chat_model(conversation=conversation, model=model.strip())
    conversation.model = model.strip()[:200]
    # Picking a model is not activity: the chat keeps its place in the list.
    Conversation.objects.filter(pk=conversation.pk).update(model=conversation.model)
    return conversation


def _touch(conversation: Conversation) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now())


def _activate(message: Message) -> None:
    """Make the message the version shown under its parent (or the chat's first message)."""
    if message.parent_id is None:
        Conversation.objects.filter(pk=message.conversation_id).update(active_root=message)
    else:
        Message.objects.filter(pk=message.parent_id).update(active_child=message)


def _new_message(
    *, conversation: Conversation, parent: Message | None, root: bool, **fields: object
) -> Message:
    """`root`: a first message (parent None); a reply without a parent follows the chat's last message."""
    if parent is not None and parent.conversation_id != conversation.pk:
        raise InvalidRequest("That message is not in this chat.", code="invalid")
    message = Message(conversation=conversation, parent=parent, **fields)
    message.new_root = root and parent is None  # see Message.save
    message.save()
    _activate(message)
    return message


@transaction.atomic
def user_message_create(
    *, conversation: Conversation, content: str, parent: Message | None = None
) -> Message:
    """A user message under `parent` (the end of the thread on screen; None starts the chat)."""
    content = _clean_content(content)
    is_first = not conversation.messages.exists()
    message = _new_message(
        conversation=conversation, parent=parent, root=True, role=Message.Role.USER, content=content
    )
    if is_first and not conversation.title_is_custom:
        conversation.title = provisional_title(content)
        conversation.save(update_fields=["title", "updated_at"])
    else:
        _touch(conversation)
    return message


@transaction.atomic
def user_message_edit(*, conversation: Conversation, message_id: int, content: str) -> Message:
    """A new version of a user message, beside the old one (which stays, with its replies, as a branch)."""
    content = _clean_content(content)
    original = conversation.messages.filter(pk=message_id, role=Message.Role.USER).first()
    if original is None:
        raise InvalidRequest("That message cannot be edited.", code="invalid")
    message = _new_message(
        conversation=conversation,
        parent=original.parent,
        root=True,
        role=Message.Role.USER,
        content=content,
    )
    _touch(conversation)
    return message


@transaction.atomic
def branch_select(*, conversation: Conversation, message_id: int) -> Message:
    """Show this version of a message (and the thread below it as last shown); persisted for every tab."""
    message = conversation.messages.filter(pk=message_id).first()
    if message is None:
        raise NotFound("That message is not in this chat.", code="not_found")
    _activate(message)
    return message


def assistant_message_create(
    *,
    conversation: Conversation,
    model: str,
    parent: Message | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
) -> Message:
    """A new reply (streaming) under `parent` (None: after the chat's last message), recording the model
    and sampling settings that write it."""
    return _new_message(
        conversation=conversation,
        parent=parent,
        root=False,
        role=Message.Role.ASSISTANT,
        status=Message.Status.STREAMING,
        model=model,
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
    )


def reply_reopen(*, message: Message) -> Message:
    """Mark a reply that stopped at its length limit as streaming again, for Continue."""
    message.status, message.finish_reason, message.error = Message.Status.STREAMING, "", ""
    Message.objects.filter(pk=message.pk).update(status=message.status, finish_reason="", error="")
    return message


def assistant_message_save(*, message: Message) -> bool:
    """Persist the streamed state of a reply; False when the reply (or its chat) was deleted meanwhile."""
    fields = (
        "content", "status", "finish_reason", "error", "model",
        "prompt_tokens", "completion_tokens", "tokens_per_second",
    )  # fmt: skip
    saved = Message.objects.filter(pk=message.pk).update(**{f: getattr(message, f) for f in fields})
    if saved:
        _touch(message.conversation)
    return bool(saved)


def reply_progress_save(*, message: Message) -> bool:
    """Save a streaming reply's progress; False when it must end: its chat was deleted, or Stop was pressed
    on a replica that does not run it."""
    if not assistant_message_save(message=message):
        return False
    return not leases.reply_stop_requested(conversation_id=message.conversation_id)


def messages_delete(*, conversation: Conversation, message_ids: list[int]) -> None:
    conversation.messages.filter(pk__in=message_ids).delete()
