"""Model cards for /v1/models from the model manager's registry, and the 404 for a model the caller
cannot use."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from inference.api import EngineClient, ModelInfo, ModelManagerClient
from webapp.api.schemas.models import ModelCard
from webapp.core.errors import NotFound
from webapp.serving.health import download_progress, load_progress
from webapp.serving.model_access import Viewer, visible
from webapp.serving.runtime import get_runtime

# OpenAI's `created` is a creation timestamp; registered models have none, so the server's start stands in.
_STARTED = int(time.time())


def _card(info: ModelInfo, manager: ModelManagerClient) -> ModelCard:
    max_len = None
    if info.state == "loaded":
        try:
            max_len = int(manager.peek(info.name).max_model_len)
        except Exception:
            max_len = None
    return ModelCard(
        id=info.name,
        created=_STARTED,
        state=str(info.state),
        aliases=list(info.aliases),
        max_model_len=max_len,
        download=download_progress(info) if info.download_bytes_done is not None else None,
        load=load_progress(info),
    )


def model_name(engine: EngineClient, requested: str | None) -> str:
    """The name to echo in responses: what the client asked for, else the served default's name."""
    if requested:
        return requested
    manager = get_runtime().peek_manager()
    default = manager.default_name if manager is not None else None
    return default or engine.model_name or "default"


def model_cards(viewer: Viewer) -> list[ModelCard]:
    """Cards of the models `viewer` may use (blocking)."""
    manager = get_runtime().manager()
    return [_card(info, manager) for info in visible(viewer, manager.list())]


def model_card(model_id: str, viewer: Viewer) -> ModelCard | None:
    """The card for a name or alias; None when no model answers to it or `viewer` may not use it."""
    manager = get_runtime().manager()
    for info in visible(viewer, manager.list()):
        if model_id == info.name or model_id in info.aliases:
            return _card(info, manager)
    return None


def model_not_found(requested: str | None, viewer: Viewer) -> NotFound:
    """The 404 for a model `viewer` cannot use, naming the ids they can: the models /v1/models lists for
    them, so a restricted model is named only to those who may use it (blocking)."""
    shown = requested if requested is not None else "default"
    usable = [info.name for info in visible(viewer, get_runtime().manager().list())]
    hint = f"Models you may use: {', '.join(usable)}." if usable else "No model is available to you."
    return NotFound(f"The model {shown!r} does not exist. {hint}", param="model", code="model_not_found")


@contextlib.asynccontextmanager
async def naming_usable_models(requested: str | None, viewer: Viewer) -> AsyncIterator[None]:
    """Turn a model_not_found raised inside into model_not_found(): the same answer whether the model is
    missing or restricted, with the ids the caller may use."""
    try:
        yield
    except NotFound as exc:
        if exc.code != "model_not_found":
            raise
        raise await asyncio.to_thread(model_not_found, requested, viewer) from exc
