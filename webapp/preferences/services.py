"""Write-side actions for preferences. Keyword-only, typed; each checks what the forms check, again."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from webapp.core.errors import InvalidRequest, PermissionDenied
from webapp.preferences.models import (
    MAX_BODY_CHARS,
    MAX_PROMPTS_PER_USER,
    MAX_TITLE_CHARS,
    SavedPrompt,
    UserDefaults,
)
from webapp.preferences.selectors import can_edit, embedding_model_names, own_prompt_count
from webapp.serving.sampling import CHAT_REPLY_TOKENS, TEMPERATURE, TOP_P, Range

MAX_SYSTEM_PROMPT_CHARS = 32_000  # the chat's own settings form allows as much
MAX_MODEL_CHARS = 200
# An embedding model (task "embed") cannot chat: neither the form nor this service takes one.
EMBEDDING_REFUSAL = "{model} is an embedding model: it cannot chat. Choose a chat model."


def _check(limits: Range[float] | Range[int], name: str, value: float | None) -> None:
    if value is None:
        return
    try:
        limits.check(name, value)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param=name, code="invalid") from exc


@transaction.atomic
def defaults_update(
    *,
    user: User,
    model: str,
    system_prompt: str,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
) -> UserDefaults:
    """Store the user's defaults for new chats; an empty or None field keeps the server's."""
    _check(TEMPERATURE, "temperature", temperature)
    _check(TOP_P, "top_p", top_p)
    _check(CHAT_REPLY_TOKENS, "max_tokens", max_tokens)
    model, system_prompt = model.strip(), system_prompt.strip()
    if len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest("The model name is too long.", param="model", code="invalid")
    if model and model in embedding_model_names(user=user):
        raise InvalidRequest(EMBEDDING_REFUSAL.format(model=model), param="model", code="invalid")
    if len(system_prompt) > MAX_SYSTEM_PROMPT_CHARS:
        raise InvalidRequest(
            f"The system prompt is longer than {MAX_SYSTEM_PROMPT_CHARS} characters.",
            param="system_prompt",
            code="invalid",
        )
    values = {
        "model": model,
        "system_prompt": system_prompt,
        "temperature": temperature,
        "top_p": top_p,
        "max_tokens": max_tokens,
    }
    defaults, _ = UserDefaults.objects.update_or_create(user=user, defaults=values)
    # "New chat" reuses the user's empty chat: it takes the values just set, so the next chat has them.
    # Through the reverse relation: chat imports this app, so importing chat's models would be a cycle.
    chosen = {k: v for k, v in values.items() if v not in ("", None)}
    if chosen:
        user.conversations.filter(messages__isnull=True).update(**chosen)
    return defaults


def defaults_reset(*, user: User) -> None:
    UserDefaults.objects.filter(user=user).delete()


def _clean_prompt(*, user: User, title: str, body: str, shared: bool) -> tuple[str, str]:
    title, body = " ".join(title.split()), body.strip()
    if not title:
        raise InvalidRequest("The title cannot be blank.", param="title", code="invalid")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidRequest(f"The title is longer than {MAX_TITLE_CHARS} characters.", param="title")
    if not body:
        raise InvalidRequest("The prompt cannot be blank.", param="body", code="invalid")
    if len(body) > MAX_BODY_CHARS:
        raise InvalidRequest(f"The prompt is longer than {MAX_BODY_CHARS} characters.", param="body")
    if shared and not user.is_staff:
        raise PermissionDenied("Only administrators can share prompts.", param="shared", code="forbidden")
    return title, body


@transaction.atomic
def prompt_create(*, user: User, title: str, body: str, shared: bool = False) -> SavedPrompt:
    title, body = _clean_prompt(user=user, title=title, body=body, shared=shared)
    # Locking the user's row serialises two tabs creating at once, so the cap holds.
    User.objects.select_for_update().filter(pk=user.pk).first()
    if own_prompt_count(user=user) >= MAX_PROMPTS_PER_USER:
        raise InvalidRequest(
            f"You already have {MAX_PROMPTS_PER_USER} saved prompts; delete some first.", code="too_many"
        )
    return SavedPrompt.objects.create(owner=user, title=title, body=body, shared=shared)


def prompt_update(*, user: User, prompt: SavedPrompt, title: str, body: str, shared: bool) -> SavedPrompt:
    if not can_edit(user=user, prompt=prompt):
        raise PermissionDenied("Only administrators can change shared prompts.", code="forbidden")
    prompt.title, prompt.body = _clean_prompt(user=user, title=title, body=body, shared=shared)
    prompt.shared = shared
    prompt.save(update_fields=["title", "body", "shared", "updated_at"])
    return prompt


def prompt_delete(*, user: User, prompt: SavedPrompt) -> None:
    if not can_edit(user=user, prompt=prompt):
        raise PermissionDenied("Only administrators can delete shared prompts.", code="forbidden")
    prompt.delete()
