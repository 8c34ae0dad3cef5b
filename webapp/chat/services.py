"""Write-side actions for chat. Keyword-only, typed, each one atomic."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from webapp.chat.models import Conversation, Message
from webapp.chat.selectors import chat_defaults, draft_conversation
from webapp.core.errors import InvalidRequest
from webapp.core.sampling import CHAT_REPLY_TOKENS, TEMPERATURE, TOP_P

MAX_MESSAGE_CHARS = 32_000
MAX_TITLE_CHARS = 200


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
    title = " ".join(title.split())[:MAX_TITLE_CHARS]
    if not title:
        raise InvalidRequest("Title is empty.", code="invalid")
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


def conversation_update_settings(
    *,
    conversation: Conversation,
    system_prompt: str,
    model: str,
    temperature: float,
    top_p: float,
    max_tokens: int,
) -> Conversation:
    TEMPERATURE.check("Temperature", temperature)
    TOP_P.check("top_p", top_p)
    CHAT_REPLY_TOKENS.check("Max tokens", max_tokens)
    conversation.system_prompt = system_prompt.strip()
    conversation.model = model.strip()
    conversation.temperature = temperature
    conversation.top_p = top_p
    conversation.max_tokens = max_tokens
    conversation.save()
    return conversation


def _touch(conversation: Conversation) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now())


@transaction.atomic
def user_message_create(*, conversation: Conversation, content: str) -> Message:
    content = _clean_content(content)
    is_first = not conversation.messages.exists()
    message = Message.objects.create(conversation=conversation, role=Message.Role.USER, content=content)
    if is_first and not conversation.title_is_custom:
        conversation.title = provisional_title(content)
        conversation.save(update_fields=["title", "updated_at"])
    else:
        _touch(conversation)
    return message


@transaction.atomic
def user_message_edit(
    *, conversation: Conversation, message_id: int, content: str
) -> tuple[Message, list[int]]:
    """Replace a user message's text and delete everything after it; returns it and the removed ids."""
    content = _clean_content(content)
    message = conversation.messages.filter(pk=message_id, role=Message.Role.USER).first()
    if message is None:
        raise InvalidRequest("That message cannot be edited.", code="invalid")
    later = conversation.messages.filter(id__gt=message.pk)
    removed = list(later.values_list("id", flat=True))
    later.delete()
    message.content = content
    message.save(update_fields=["content"])
    _touch(conversation)
    return message, removed


@transaction.atomic
def last_reply_remove(*, conversation: Conversation) -> list[int]:
    """Drop the final assistant reply before regenerating it; returns the removed ids."""
    last = conversation.messages.order_by("-id").first()
    if last is None:
        raise InvalidRequest("There is nothing to regenerate.", code="invalid")
    if last.role == Message.Role.USER:
        return []
    if not conversation.messages.filter(role=Message.Role.USER).exists():
        raise InvalidRequest("There is nothing to regenerate.", code="invalid")
    removed = last.pk  # delete() clears pk
    last.delete()
    return [removed]


def assistant_message_create(*, conversation: Conversation, model: str) -> Message:
    return Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, status=Message.Status.STREAMING, model=model
    )


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


def messages_delete(*, conversation: Conversation, message_ids: list[int]) -> None:
    conversation.messages.filter(pk__in=message_ids).delete()
