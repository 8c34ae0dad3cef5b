"""Export a chat as JSON or Markdown, and import one back from JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from django.contrib.auth.models import User
from django.db import transaction
from django.template.defaultfilters import filesizeformat
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webapp.chat.models import Conversation, Message
from webapp.chat.services import MAX_MESSAGE_CHARS
from webapp.core.errors import InvalidRequest
from webapp.core.sampling import ChatReplyTokens, Temperature, TopP

FORMAT: Literal["mooncake.chat"] = "mooncake.chat"
MAX_IMPORT_BYTES = 5 * 1024 * 1024


class ExportedMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["user", "assistant"]
    content: str = Field(max_length=MAX_MESSAGE_CHARS * 4)
    status: Literal["complete", "stopped", "error", "streaming"] = "complete"
    finish_reason: str = Field(default="", max_length=32)
    model: str = Field(default="", max_length=200)
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    tokens_per_second: float | None = Field(default=None, ge=0)
    created_at: datetime | None = None


class ExportedChat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    format: Literal["mooncake.chat"] = FORMAT
    version: Literal[1] = 1
    title: str = Field(default="Imported chat", max_length=200)
    system_prompt: str = Field(default="", max_length=MAX_MESSAGE_CHARS)
    model: str = Field(default="", max_length=200)
    temperature: Temperature = 0.7
    top_p: TopP = 1.0
    max_tokens: ChatReplyTokens = 512
    messages: list[ExportedMessage] = Field(default_factory=list, max_length=5_000)


def export_data(*, conversation: Conversation) -> dict[str, Any]:
    chat = ExportedChat(
        title=conversation.title,
        system_prompt=conversation.system_prompt,
        model=conversation.model,
        temperature=conversation.temperature,
        top_p=conversation.top_p,
        max_tokens=conversation.max_tokens,
        messages=[
            ExportedMessage(
                role=m.role,  # type: ignore[arg-type]
                content=m.content,
                status=m.status,  # type: ignore[arg-type]
                finish_reason=m.finish_reason,
                model=m.model,
                prompt_tokens=m.prompt_tokens,
                completion_tokens=m.completion_tokens,
                tokens_per_second=m.tokens_per_second,
                created_at=m.created_at,
            )
            for m in conversation.messages.order_by("id")
        ],
    )
    return chat.model_dump(mode="json")


def export_markdown(*, conversation: Conversation) -> str:
    parts = [f"# {conversation.title}\n"]
    if conversation.system_prompt:
        parts.append(f"**System:** {conversation.system_prompt}\n")
    for message in conversation.messages.order_by("id"):
        heading = "User" if message.role == Message.Role.USER else f"Assistant ({message.model or 'model'})"
        parts.append(f"## {heading}\n\n{message.content}\n")
    return "\n".join(parts)


def check_import_size(size: int | None) -> None:
    """InvalidRequest for an upload over MAX_IMPORT_BYTES, judged by its size before anything reads it."""
    if size is not None and size > MAX_IMPORT_BYTES:
        raise InvalidRequest(
            f"The file is too large to import (at most {filesizeformat(MAX_IMPORT_BYTES)}).", code="invalid"
        )


@transaction.atomic
def import_chat(*, user: User, raw: bytes) -> Conversation:
    """Create a chat from exported JSON; InvalidRequest with a readable reason when the file is not one."""
    check_import_size(len(raw))
    try:
        chat = ExportedChat.model_validate(json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest("The file is not valid JSON.", code="invalid") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidRequest(
            f"Not a Mooncake chat export ({where}: {first['msg']}).", code="invalid"
        ) from exc
    if not chat.messages:
        raise InvalidRequest("The export has no messages.", code="invalid")
    conversation = Conversation.objects.create(
        user=user,
        title=chat.title.strip() or "Imported chat",
        title_is_custom=True,
        system_prompt=chat.system_prompt,
        model=chat.model,
        temperature=chat.temperature,
        top_p=chat.top_p,
        max_tokens=chat.max_tokens,
    )
    Message.objects.bulk_create(
        Message(
            conversation=conversation,
            role=m.role,
            content=m.content,
            # A reply that was streaming when exported is not streaming here.
            status=Message.Status.STOPPED if m.status == "streaming" else m.status,
            finish_reason=m.finish_reason,
            model=m.model,
            prompt_tokens=m.prompt_tokens,
            completion_tokens=m.completion_tokens,
            tokens_per_second=m.tokens_per_second,
        )
        for m in chat.messages
    )
    return conversation
