"""The engine surface the API uses, typed once, and model resolution mapped to API errors."""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from webapp.api.errors import from_engine_error
from webapp.core.engine import get_engine, peek_manager


class Tokenizer(Protocol):
    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]: ...
    def decode(self, ids: list[int], *args: Any, **kwargs: Any) -> str: ...


async def engine_for(model: str | None) -> Any:
    """The loaded engine for `model` (None: the default); 404 / 503 as APIError."""
    try:
        return await get_engine(model)
    except Exception as exc:
        raise from_engine_error(exc) from exc


def expecting(engine: Any) -> contextlib.AbstractContextManager[Any]:
    """The engine's expect() notice while a request is prepared (AsyncEngine has it; doubles may not)."""
    expect = getattr(engine, "expect", None)
    return expect() if callable(expect) else contextlib.nullcontext()


def vocab_size(engine: Any) -> int:
    """Ids the tokenizer can decode: the range token-id prompts and logit_bias keys must fall in."""
    tokenizer = engine.tokenizer
    try:
        return len(tokenizer)
    except TypeError:
        return int(tokenizer.vocab_size)


def queue_capacity(engine: Any) -> int | None:
    """Requests the engine's waiting queue can ever hold (AsyncEngine: its config's max_queue_len).

    None when the engine does not say (test doubles): the engine's own admission still applies.
    """
    config = getattr(getattr(engine, "engine", None), "config", None)
    capacity = getattr(config, "max_queue_len", None)
    return capacity if isinstance(capacity, int) else None


def model_name(engine: Any, requested: str | None) -> str:
    """The name to echo in responses: what the client asked for, else the served default's name."""
    if requested:
        return requested
    manager = peek_manager()
    return str(getattr(manager, "default_name", None) or getattr(engine, "model_name", None) or "default")
