"""A request for a model that is still loading waits for it, up to the model's `load_wait_seconds`.

The manager is thread-safe and its loads run on threads of their own; it announces no state changes, so a
waiting request looks again every POLL_SECONDS with an asyncio sleep: the event loop stays free, and a
client that disconnects cancels the request's task, which ends the wait with nothing left behind. Past the
bound the request gets the 503 (with Retry-After) it got at once before; a model that fails meanwhile
answers with that failure at once. A registered model that is not on its way is loaded first where a loader
is installed (webapp.serving.on_demand: memory allowing, else a 503 that says why).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from inference.api import EngineClient, ModelInfo, ModelManagerClient, NoModelLoadedError
from webapp.core.errors import MODEL_RETRY_AFTER_S, Unavailable
from webapp.core.load_wait import load_wait
from webapp.core.request_id import error_reference

logger = logging.getLogger(__name__)

# The states a model passes through on its way to "loaded" (a crashed engine's restart included).
WAITING_STATES = frozenset({"downloading", "loading", "restarting"})
POLL_SECONDS = 0.1
# Loads a registered model that is not on its way and waits for it, raising why it cannot
# (webapp.serving.on_demand installs it, as a chat's pick loads one); None: such a model is refused.
MissingModelLoader = Callable[[ModelManagerClient, "str | None"], Awaitable[None]]
_missing_model_loader: MissingModelLoader | None = None


def set_missing_model_loader(loader: MissingModelLoader | None) -> None:
    global _missing_model_loader
    _missing_model_loader = loader


def configured_wait(name: str) -> float:
    """mooncake.yaml's wait for the model registered as `name`."""
    return float(load_wait(settings.MOONCAKE, name).value)


async def ready_engine(
    manager: ModelManagerClient,
    model: str | None,
    *,
    bound: Callable[[str], float] = configured_wait,
    poll: float = POLL_SECONDS,
) -> EngineClient:
    """The loaded engine for `model` (None: the default), once it is loaded. Raises what manager.get
    raises for a model that is not on its way (unknown, unloaded), Unavailable "model_loading" past the
    bound and Unavailable "model_failed" for a load that failed while the request waited."""
    loop = asyncio.get_running_loop()
    deadline: float | None = None
    while True:
        try:
            return manager.get(model)
        except NoModelLoadedError:
            info = _info_of(manager, model)
            if info is None:
                raise
            if info.state == "failed" and deadline is not None:
                raise _failed(info) from None
            if info.state not in WAITING_STATES:
                if _missing_model_loader is None or deadline is not None:
                    raise
                deadline = loop.time() + bound(info.name)  # the loader's own wait is bounded likewise
                await _missing_model_loader(manager, model)
                continue
            now = loop.time()
            if deadline is None:
                deadline = now + bound(info.name)
            if now >= deadline:
                raise Unavailable(
                    f"The model {info.name} is still loading; retry shortly.",
                    code="model_loading",
                    retry_after=MODEL_RETRY_AFTER_S,
                ) from None
            await asyncio.sleep(min(poll, deadline - now))


def _info_of(manager: ModelManagerClient, model: str | None) -> ModelInfo | None:
    name = model or manager.default_name
    infos: list[Any] = manager.list()
    return next((i for i in infos if i.name == name or name in i.aliases), None)


def _failed(info: ModelInfo) -> Unavailable:
    """The load's error can hold paths or CUDA details: the caller gets a reference, the log the details."""
    reference = error_reference()
    logger.error("model %s failed to load (reference %s): %s", info.name, reference, info.error)
    return Unavailable(
        f"The model {info.name} failed to load; the details are in the server log (request id {reference}).",
        code="model_failed",
        retry_after=MODEL_RETRY_AFTER_S,
        reference=reference,
    )
