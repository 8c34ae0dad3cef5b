"""The engine surface the API uses, typed once, and model resolution mapped to API errors."""

from __future__ import annotations

from inference.api import EngineClient
from webapp.api.errors import from_engine_error
from webapp.core.engine import get_engine, peek_manager


async def engine_for(model: str | None) -> EngineClient:
    """The loaded engine for `model` (None: the default); 404 / 503 as APIError."""
    try:
        return await get_engine(model)
    except Exception as exc:
        raise from_engine_error(exc) from exc


def vocab_size(engine: EngineClient) -> int:
    """Ids the tokenizer can decode: the range token-id prompts and logit_bias keys must fall in."""
    return len(engine.tokenizer)


def model_name(engine: EngineClient, requested: str | None) -> str:
    """The name to echo in responses: what the client asked for, else the served default's name."""
    if requested:
        return requested
    manager = peek_manager()
    default = manager.default_name if manager is not None else None
    return default or engine.model_name or "default"
