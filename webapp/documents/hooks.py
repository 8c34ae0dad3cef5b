"""The chat's one hook into documents: registered with webapp.serving.chat_context when the app is ready, so
webapp.chat.admission runs with_documents() while preparing a reply, before the prompt is templated and
checked (the chat never imports this app)."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from inference.api import EngineClient
from webapp.chat.models import Conversation
from webapp.documents import citations
from webapp.documents.context import document_context
from webapp.documents.ranking import QueryVector
from webapp.documents.selectors import has_context_documents
from webapp.documents.semantic import question_vector
from webapp.serving.prompts import encode_text, render_chat

# Tokens kept free for the template's wrapping of the added system text.
TEMPLATE_MARGIN = 32


async def with_documents(
    *, conversation: Conversation, messages: list[dict[str, Any]], engine: EngineClient
) -> list[dict[str, Any]]:
    """`messages` with the chat's documents in the system message, within what the context leaves after
    the history and the reply's own tokens; unchanged when the chat has no ready documents. With an
    embedding model loaded, the question's vector is made first: the engine's call is async, the rest is
    database work in a thread."""
    query = await question_vector(conversation=conversation, question=_question(messages))
    return await database_sync_to_async(_with_documents)(conversation, messages, engine, query)


async def extend(
    conversation: object, messages: list[dict[str, Any]], engine: EngineClient
) -> list[dict[str, Any]]:
    """The extender webapp.serving.chat_context runs for every reply."""
    if not isinstance(conversation, Conversation):
        return messages
    return await with_documents(conversation=conversation, messages=messages, engine=engine)


def _question(messages: list[dict[str, Any]]) -> str:
    return str(next((m["content"] for m in reversed(messages) if m["role"] == "user"), ""))


def _with_documents(
    conversation: Conversation,
    messages: list[dict[str, Any]],
    engine: EngineClient,
    query: QueryVector | None = None,
) -> list[dict[str, Any]]:
    if not has_context_documents(conversation=conversation):
        citations.remember(conversation.pk, [])
        return messages
    limit = int(engine.max_model_len)
    history = len(render_chat(engine, messages))
    reply = min(conversation.max_tokens, limit // 4)
    budget = min(settings.MOONCAKE_DOCUMENTS_CONTEXT_TOKENS, limit - history - reply - TEMPLATE_MARGIN)
    context = document_context(
        conversation=conversation,
        question=_question(messages),
        token_budget=budget,
        count_tokens=lambda text: len(encode_text(engine, text)),
        query=query,
    )
    citations.remember(conversation.pk, context.passages)
    if not context.text:
        return messages
    return add_system_text(messages, context.text)


def add_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """After the chat's own system prompt when it has one (many templates take a single system message)."""
    if messages and messages[0]["role"] == "system":
        return [dict(messages[0], content=f"{messages[0]['content']}\n\n{text}"), *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
