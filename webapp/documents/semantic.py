"""The async half of ranking by meaning, run in the web server (where the engine is) before a reply's
context is built: the question's vector, and the vectors of the chat's chunks that lack one.

Chunks are written by the Celery worker, which never loads a model, so they are embedded here, lazily:
each question embeds up to FILL_PER_QUESTION of the chat's chunks that have no vector from the current
model (none yet, or another model's), so a long document is covered over its first few questions and
full-text search finds its passages meanwhile. Any failure (the model unloading, a full queue) leaves that
question to full-text search alone.
"""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async

from webapp.api.services.embeddings import embed_texts
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest, MooncakeError
from webapp.documents import vectors
from webapp.documents.embedding_model import loaded_model
from webapp.documents.models import Document
from webapp.documents.ranking import QueryVector
from webapp.documents.selectors import context_documents
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)

FILL_PER_QUESTION = 128
BATCH = 32


async def question_vector(*, conversation: Conversation, question: str) -> QueryVector | None:
    """The question's vector for ranking the chat's ready documents, their missing vectors filled first;
    None (full-text search alone) when no embedding model is loaded, the chat has no ready documents, or
    embedding fails."""
    if not question.strip():
        return None
    model = await database_sync_to_async(loaded_model)()
    if model is None:
        return None
    document_ids = await database_sync_to_async(_ready_ids)(conversation)
    if not document_ids:
        return None
    try:
        await fill(model=model, document_ids=document_ids, limit=FILL_PER_QUESTION)
        [vector] = await embed(model, [question])
    except MooncakeError as exc:
        logger.warning("Ranking by meaning skipped for this question (%s: %s)", model, exc)
        return None
    except Exception:
        logger.exception("Ranking by meaning failed for this question (%s)", model)
        return None
    return QueryVector(model=model, vector=vector)


async def fill(*, model: str, document_ids: list[int], limit: int) -> int:
    """Embed up to `limit` chunks of these documents that lack a vector from `model`; how many were saved."""
    todo = await database_sync_to_async(vectors.missing)(document_ids=document_ids, model=model, limit=limit)
    saved = 0
    for start in range(0, len(todo), BATCH):
        batch = todo[start : start + BATCH]
        try:
            found = await embed(model, [text for _, text in batch])
            by_chunk = {pk: vector for (pk, _), vector in zip(batch, found, strict=True)}
        except InvalidRequest:  # one text the model refuses must not hold back the others
            by_chunk = await _one_by_one(model, batch)
        saved += await database_sync_to_async(vectors.store)(model=model, vectors=by_chunk)
    return saved


async def _one_by_one(model: str, batch: list[tuple[int, str]]) -> dict[int, list[float]]:
    by_chunk = {}
    for pk, text in batch:
        try:
            [by_chunk[pk]] = await embed(model, [text])
        except InvalidRequest as exc:  # left without a vector: full-text search still finds it
            logger.warning("Chunk %s was not embedded by %s: %s", pk, model, exc)
    return by_chunk


async def embed(model: str, texts: list[str]) -> list[list[float]]:
    """Vectors for `texts`, each first cut to what the model reads (a chunk may be longer)."""
    fitted = await asyncio.to_thread(fit_texts, model, texts)
    return await embed_texts(model=model, texts=fitted)


def fit_texts(model: str, texts: list[str]) -> list[str]:
    """Each text cut to the model's context (its first tokens), non-empty. Blocking (tokenizing); texts go
    unchanged when the model is gone (embed_texts then says why)."""
    manager = get_runtime().peek_manager()
    try:
        engine = manager.peek(model) if manager is not None else None
    except Exception:
        engine = None
    if engine is None:
        return [text if text.strip() else "." for text in texts]
    tokenizer = engine.tokenizer
    room = int(engine.max_model_len) - len(tokenizer.encode("", add_special_tokens=True))  # [CLS], [SEP]
    fitted = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        cut = room
        while len(ids) > room:  # decoding may not give back the same tokens: cut until it fits
            text = tokenizer.decode(ids[:cut], skip_special_tokens=True)
            if len(tokenizer.encode(text, add_special_tokens=False)) <= room:
                break
            cut = cut * 9 // 10
        fitted.append(text if text.strip() else ".")
    return fitted


def _ready_ids(conversation: Conversation) -> list[int]:
    ready = context_documents(conversation=conversation).filter(state=Document.State.READY)
    return list(ready.values_list("pk", flat=True))
