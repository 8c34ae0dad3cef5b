"""The embedding service: /v1/embeddings, and embed_texts for the server's own use (document ranking).

Requests meet the same front door as generations: the caller's limits (one request, its tokens counted),
per-model access (a model the caller may not use is unknown), the model's load wait, and a request-log row.
The model must be served for task "embed" (an EmbeddingClient); its batching thread runs the vectors.
"""

from __future__ import annotations

import asyncio
import base64
import math
import struct
import time
from typing import Any

from inference.api import EmbeddingClient, EngineClient, PromptTooLongError
from webapp.accounts.request_log import RequestRecord, request_record_save
from webapp.api.auth import Caller
from webapp.api.schemas.embeddings import EmbeddingRequest, input_rows
from webapp.api.services.models import model_name
from webapp.core.errors import InvalidRequest, from_engine_error
from webapp.serving.limits import Admission, Limiter
from webapp.serving.prompts import vocab_size
from webapp.serving.runtime import get_runtime

ENDPOINT = "embeddings"


def not_for_embeddings(model: str) -> InvalidRequest:
    """The 400 for a generation model named in /v1/embeddings."""
    return InvalidRequest(
        f"The model {model!r} does not support embeddings; use an embedding model (task: embed).",
        param="model",
        code="model_not_supported",
    )


def only_for_embeddings(model: str) -> InvalidRequest:
    """The 400 for an embedding model named where text is generated (chat, completions)."""
    return InvalidRequest(
        f"The model {model!r} is an embedding model; it only serves /v1/embeddings.",
        param="model",
        code="model_not_supported",
    )


def embedder(engine: EngineClient, requested: str | None) -> EmbeddingClient:
    if not isinstance(engine, EmbeddingClient):
        raise not_for_embeddings(model_name(engine, requested))
    return engine


async def create_embeddings(caller: Caller, payload: EmbeddingRequest) -> dict[str, Any]:
    """OpenAI's embeddings response for `payload`; every outcome is one request-log row."""
    record = RequestRecord(endpoint=ENDPOINT, model=payload.model or "")
    started = time.monotonic()
    try:
        body = await _create(caller, payload, record)
    except BaseException as exc:
        record.fail_with(exc)
        raise
    finally:
        record.duration_s = time.monotonic() - started
        await asyncio.shield(_save(caller, record))
    return body


async def _create(caller: Caller, payload: EmbeddingRequest, record: RequestRecord) -> dict[str, Any]:
    service = get_runtime().generation
    async with service.admitted(caller.limit_checks) as admission:
        engine = await service.engine(payload.model, caller.viewer)
        record.model = name = model_name(engine, payload.model)
        model = embedder(engine, payload.model)
        rows = await asyncio.to_thread(_token_rows, engine, payload)
        record.prompt_text = "\n".join(row for row in input_rows(payload.input) if isinstance(row, str))
        dimensions = _dimensions(model, payload.dimensions)
        vectors = await _embed(model, rows)
        record.prompt_tokens = tokens = sum(len(row) for row in rows)
        record.finish_reasons = ["stop"]
        await _count_tokens(service.limiter, admission, tokens)
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": _encoded(_truncated(v, dimensions), payload.encoding_format),
        }
        for i, v in enumerate(vectors)
    ]
    return {
        "object": "list",
        "data": data,
        "model": name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def embed_texts(*, model: str, texts: list[str], truncate: bool = False) -> list[list[float]]:
    """Vectors for `texts` from the embedding model `model`, for the server's own work (no caller's limits
    or request log). `truncate`: a text past the model's length is embedded from its first tokens (its
    last token kept: BERT's [SEP]) instead of refused. Raises the hierarchy's errors: NotFound,
    InvalidRequest (a text too long, a model that does not embed), Unavailable."""
    if not texts or any(not text for text in texts):
        raise InvalidRequest("texts must be a non-empty list of non-empty strings", param="input")
    engine = await get_runtime().generation.engine(model)
    client = embedder(engine, model)
    rows = await asyncio.to_thread(lambda: [_encode(engine, text) for text in texts])
    if truncate:
        limit = int(engine.max_model_len)
        rows = [row if len(row) <= limit else row[: limit - 1] + row[-1:] for row in rows]
    _check_lengths(engine, rows)
    return await _embed(client, rows)


def _token_rows(engine: EngineClient, payload: EmbeddingRequest) -> list[list[int]]:
    rows = [_encode(engine, row) if isinstance(row, str) else row for row in input_rows(payload.input)]
    _check_lengths(engine, rows)
    vocab = vocab_size(engine)
    bad = next((t for row in rows for t in row if t >= vocab), None)
    if bad is not None:
        raise InvalidRequest(f"Token id {bad} is out of vocabulary (size {vocab}).", param="input")
    return rows


def _encode(engine: EngineClient, text: str) -> list[int]:
    return list(engine.tokenizer.encode(text))  # with the model's special tokens ([CLS] ... [SEP])


def _check_lengths(engine: EngineClient, rows: list[list[int]]) -> None:
    limit = int(engine.max_model_len)
    for index, row in enumerate(rows):
        if len(row) > limit:
            raise InvalidRequest(
                f"This model's maximum context length is {limit} tokens, however input {index} has "
                f"{len(row)} tokens. Please reduce the length of the input.",
                param="input",
                code="context_length_exceeded",
            )


def _dimensions(model: EmbeddingClient, requested: int | None) -> int | None:
    if requested is None:
        return None
    if not model.truncatable:
        raise InvalidRequest("This model does not support specifying dimensions.", param="dimensions")
    if requested > model.dimensions:
        raise InvalidRequest(
            f"dimensions is {requested}, but this model's vectors have {model.dimensions}.",
            param="dimensions",
        )
    return requested


async def _embed(model: EmbeddingClient, rows: list[list[int]]) -> list[list[float]]:
    try:
        return await model.embed(rows)
    except PromptTooLongError as exc:  # _check_lengths refuses these first; the engine checks again
        raise InvalidRequest(str(exc), param="input", code="context_length_exceeded") from exc
    except Exception as exc:  # a full queue (503), a dead engine, ids it refuses (400), ...
        raise from_engine_error(exc) from exc


def _truncated(vector: list[float], dimensions: int | None) -> list[float]:
    """The first `dimensions` values, scaled back to unit length (Matryoshka embeddings)."""
    if dimensions is None or dimensions >= len(vector):
        return vector
    head = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head] if norm > 0 else head


def _encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":  # OpenAI's: the little-endian float32 bytes, base64-encoded
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


async def _count_tokens(limiter: Limiter, admission: Admission, tokens: int) -> None:
    """Into the caller's token quotas, as a generation's are (a network round trip off the loop)."""
    if limiter.local:
        limiter.add_tokens(admission, tokens)
    else:
        await asyncio.to_thread(limiter.add_tokens, admission, tokens)


async def _save(caller: Caller, record: RequestRecord) -> None:
    await request_record_save(record=record, user_id=caller.user_id, api_key_id=caller.api_key_id)
