"""Export a chat as JSON or Markdown, and import one back from JSON.

JSON version 2 holds the whole tree: every message has an `id` (numbered within the file) and its
`parent`'s, and `active_path` lists the thread on screen. Version 1 files (and any without ids) are one
line: each message answers the one before. Markdown has the thread on screen only.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from datetime import datetime
from typing import Any, Literal

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.template.defaultfilters import filesizeformat
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webapp.chat.models import Conversation, Message
from webapp.chat.selectors import active_path
from webapp.chat.services import MAX_MESSAGE_CHARS
from webapp.core.errors import InvalidRequest
from webapp.serving.sampling import ChatReplyTokens, Temperature, TopP

FORMAT: Literal["mooncake.chat"] = "mooncake.chat"
MAX_IMPORT_BYTES = 5 * 1024 * 1024
MAX_IMPORT_MESSAGES = 5_000


class ExportedMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int | None = Field(default=None, ge=1)
    parent: int | None = Field(default=None, ge=1)
    role: Literal["user", "assistant"]
    content: str = Field(max_length=MAX_MESSAGE_CHARS * 4)
    status: Literal["complete", "stopped", "error", "streaming"] = "complete"
    finish_reason: str = Field(default="", max_length=32)
    model: str = Field(default="", max_length=200)
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    tokens_per_second: float | None = Field(default=None, ge=0)
    temperature: Temperature | None = None
    top_p: TopP | None = None
    max_tokens: ChatReplyTokens | None = None
    created_at: datetime | None = None


class ExportedChat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    format: Literal["mooncake.chat"] = FORMAT
    version: Literal[1, 2] = 2
    title: str = Field(default="Imported chat", max_length=200)
    system_prompt: str = Field(default="", max_length=MAX_MESSAGE_CHARS)
    model: str = Field(default="", max_length=200)
    temperature: Temperature = 0.7
    top_p: TopP = 1.0
    max_tokens: ChatReplyTokens = 512
    messages: list[ExportedMessage] = Field(default_factory=list, max_length=MAX_IMPORT_MESSAGES)
    active_path: list[int] | None = Field(default=None, max_length=MAX_IMPORT_MESSAGES)


def export_data(*, conversation: Conversation) -> dict[str, Any]:
    rows = list(conversation.messages.order_by("id"))
    number = {m.pk: i for i, m in enumerate(rows, start=1)}  # database ids stay private
    chat = ExportedChat(
        title=conversation.title,
        system_prompt=conversation.system_prompt,
        model=conversation.model,
        temperature=conversation.temperature,
        top_p=conversation.top_p,
        max_tokens=conversation.max_tokens,
        messages=[
            ExportedMessage(
                id=number[m.pk],
                parent=number.get(m.parent_id) if m.parent_id is not None else None,
                role=m.role,  # type: ignore[arg-type]
                content=m.content,
                status=m.status,  # type: ignore[arg-type]
                finish_reason=m.finish_reason,
                model=m.model,
                prompt_tokens=m.prompt_tokens,
                completion_tokens=m.completion_tokens,
                tokens_per_second=m.tokens_per_second,
                temperature=m.temperature,
                top_p=m.top_p,
                max_tokens=m.max_tokens,
                created_at=m.created_at,
            )
            for m in rows
        ],
        active_path=[number[m.pk] for m in active_path(conversation=conversation)],
    )
    return chat.model_dump(mode="json")


def export_markdown(*, conversation: Conversation) -> str:
    parts = [f"# {conversation.title}\n"]
    if conversation.system_prompt:
        parts.append(f"**System:** {conversation.system_prompt}\n")
    for message in active_path(conversation=conversation):
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
    parents = _parents(chat.messages)
    path = _checked_path(chat.active_path, parents)
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
    by_id = {key: m for key, m in zip(parents, chat.messages, strict=True)}
    created: dict[int, Message] = {}
    # Parents before children: one insert per generation, each row pointing at one already saved.
    for generation in _generations(parents):
        rows = [_row(conversation, by_id[key], created.get(parents[key] or 0)) for key in generation]
        for key, row in zip(generation, _insert(rows), strict=True):
            created[key] = row
    if path:
        Conversation.objects.filter(pk=conversation.pk).update(active_root=created[path[0]])
        for parent_key, child_key in itertools.pairwise(path):
            Message.objects.filter(pk=created[parent_key].pk).update(active_child=created[child_key])
    return conversation


def _parents(messages: list[ExportedMessage]) -> dict[int, int | None]:
    """Each message's id to its parent's (in file order); refuses duplicates, dangling parents, cycles."""
    if all(m.id is None and m.parent is None for m in messages):  # version 1: one line
        return {i: (i - 1 if i > 1 else None) for i in range(1, len(messages) + 1)}
    parents: dict[int, int | None] = {}
    for position, m in enumerate(messages, start=1):
        if m.id is None:
            raise InvalidRequest(f"Message {position} of the export has no id.", code="invalid")
        if m.id in parents:
            raise InvalidRequest(f"Two messages of the export have the id {m.id}.", code="invalid")
        parents[m.id] = m.parent
    for key, parent in parents.items():
        if parent is not None and parent not in parents:
            raise InvalidRequest(
                f"Message {key} of the export answers message {parent}, which is not in it.", code="invalid"
            )
    # With one parent each, a message no first message leads down to is in (or under) a cycle.
    if sum(len(level) for level in _generations(parents)) != len(parents):
        raise InvalidRequest("The export's messages answer each other in a cycle.", code="invalid")
    return parents


def _checked_path(path: list[int] | None, parents: dict[int, int | None]) -> list[int]:
    """The thread to show: a line from a first message down, as the export says; else none (newest)."""
    if not path:
        return []
    previous: int | None = None
    for key in path:
        if key not in parents or parents[key] != previous:
            raise InvalidRequest(
                "The export's active_path is not a line of messages from a first one down.", code="invalid"
            )
        previous = key
    return path


def _generations(parents: dict[int, int | None]) -> list[list[int]]:
    children: dict[int | None, list[int]] = defaultdict(list)
    for key, parent in parents.items():
        children[parent].append(key)
    levels, level = [], children[None]
    while level:
        levels.append(level)
        level = [child for key in level for child in children[key]]
    return levels


def _row(conversation: Conversation, m: ExportedMessage, parent: Message | None) -> Message:
    return Message(
        conversation=conversation,
        parent=parent,
        role=m.role,
        content=m.content,
        # A reply that was streaming when exported is not streaming here.
        status=Message.Status.STOPPED if m.status == "streaming" else m.status,
        finish_reason=m.finish_reason,
        model=m.model,
        prompt_tokens=m.prompt_tokens,
        completion_tokens=m.completion_tokens,
        tokens_per_second=m.tokens_per_second,
        temperature=m.temperature,
        top_p=m.top_p,
        max_tokens=m.max_tokens,
        created_at=m.created_at or timezone.now(),
    )


def _insert(rows: list[Message]) -> list[Message]:
    if connection.features.can_return_rows_from_bulk_insert:
        return Message.objects.bulk_create(rows)
    for row in rows:  # a database that cannot say the new ids: one insert each
        row.new_root = row.parent is None
        row.save()
    return rows
