"""A registered model that is not loaded loads when a user picks it, or sends with it, memory allowing (as
Ollama does).

The load is the console's Load (webapp.console.lifecycle.model_load): saved for every replica and announced,
so each replica loads it and the model reads the same whichever replica answers. One load per model: the
check and the start run under one lock, and a model already on its way (or with a job running for it) is
only waited for. Memory is checked first, on this replica: a model that would not fit beside the loaded
ones is refused with its name and theirs, rather than evicting a model someone else is using; an
administrator decides what to unload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from inference.api import ModelInfo, ModelManagerClient
from webapp.core.errors import MODEL_RETRY_AFTER_S, Conflict, NotFound, Unavailable
from webapp.serving.model_access import Viewer, ensure_may_use
from webapp.serving.model_states import LOADING_STATES, ModelStatus
from webapp.serving.model_wait import configured_wait, set_missing_model_loader
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)

GIB = 1 << 30
UNAVAILABLE = "model_unavailable"
_lock = threading.Lock()  # one check-and-start at a time in this process: concurrent picks start one load


@dataclass(frozen=True, slots=True)
class Memory:
    """What loading a model would take, and what is free for it; None where it cannot be told."""

    needed: int | None
    free: int | None
    source: str = "the memory budget"


MemoryReader = Callable[[ModelManagerClient, ModelInfo], Memory]


def find(manager: ModelManagerClient, name: str | None) -> ModelInfo | None:
    """The model `name` (a name or an alias; None: the default) stands for, if registered."""
    wanted = name or manager.default_name
    return next((i for i in manager.list() if wanted in (i.name, *i.aliases)), None)


def load_on_demand(
    *,
    name: str | None,
    viewer: Viewer | None = None,
    manager: ModelManagerClient | None = None,
    memory: MemoryReader | None = None,
    start: Callable[[str], None] | None = None,
) -> ModelStatus:
    """READY when `name` (None: the default) serves now; LOADING once its load runs, started here if it
    was not loaded. Raises NotFound for a model that does not exist (or `viewer` may not use), and
    Unavailable ("model_unavailable") naming the model and why it cannot load. Blocking."""
    manager = manager or get_runtime().manager()
    if viewer is not None:
        ensure_may_use(viewer, manager, name)
    with _lock:
        info = find(manager, name)
        if info is None and name is None:
            raise Unavailable(
                "No model is set up yet. An administrator can add one in the console.", code="no_model"
            )
        if info is None:
            raise _unknown(name)
        if info.state == "loaded":
            return ModelStatus.READY
        if info.state in LOADING_STATES or get_runtime().jobs.active_for(info.name) is not None:
            return ModelStatus.LOADING
        if info.state == "unloading":
            raise Unavailable(
                f"{info.name} is being unloaded by an administrator; pick it again in a moment to load it.",
                code=UNAVAILABLE,
                retry_after=MODEL_RETRY_AFTER_S,
            )
        if info.state == "failed" and not _out_of_memory(info):
            raise Unavailable(failed_message(info.name), code=UNAVAILABLE)
        refusal = memory_refusal(manager, info, (memory or read_memory)(manager, info))
        if refusal is not None:
            raise Unavailable(refusal, code=UNAVAILABLE)
        (start or start_everywhere)(info.name)
        return ModelStatus.LOADING


def failed_message(name: str) -> str:
    return (
        f"{name} failed to load; an administrator can see why in the console's Models page and load it again."
    )


def _unknown(name: str | None) -> NotFound:
    """Worded as model_access words a model the viewer may not use, so neither reveals the other."""
    return NotFound(f"model {name or 'default'!r} does not exist", param="model", code="model_not_found")


def _out_of_memory(info: ModelInfo) -> bool:
    """A load refused for memory may fit now that something else was unloaded: worth another try."""
    return (info.error or "").startswith("InsufficientMemoryError")


def memory_refusal(manager: ModelManagerClient, info: ModelInfo, memory: Memory) -> str | None:
    """Why `info` cannot load beside the loaded models, naming them; None when it fits (or cannot be told)."""
    if memory.needed is None or memory.free is None or memory.needed <= memory.free:
        return None
    loaded = [i.name for i in manager.list() if i.state == "loaded" and i.name != info.name]
    need = f"it needs about {memory.needed / GIB:.2f} GiB and {max(memory.free, 0) / GIB:.2f} GiB is free"
    if not loaded:
        return (
            f"{info.name} is not loaded, and there is not enough memory to load it ({need} under "
            f"{memory.source}). An administrator can raise the memory budget in the console."
        )
    names = ", ".join(loaded)
    return (
        f"{info.name} is not loaded, and there is not enough memory to load it beside {names} ({need}). "
        f"An administrator can unload {names} in the console."
    )


def read_memory(manager: ModelManagerClient, info: ModelInfo) -> Memory:
    """The model's estimated footprint (weights and KV cache, from its files) and what is free: the budget
    less the loaded models where one is set, else what the device has free now."""
    try:
        estimate = _estimate(info)
    except Exception:  # an estimate is a courtesy: the load itself checks the budget and says why it failed
        logger.warning("Could not size %s; loading it unchecked", info.name, exc_info=True)
        return Memory(needed=None, free=None)
    if estimate is None:
        return Memory(needed=None, free=None)
    needed, available_now = estimate
    budget = manager.memory_budget_bytes
    if budget is None:
        return Memory(needed=needed, free=available_now, source="the memory free on this machine")
    held = sum(i.memory_bytes or 0 for i in manager.list() if i.state == "loaded" and i.name != info.name)
    return Memory(needed=needed, free=budget - held)


# The console owns the registrations' settings and the shared model state; serving sits below the apps and
# cannot import it, so the console installs these at start (webapp.console.apps).
Estimator = Callable[[ModelInfo], "tuple[int, int] | None"]
_estimator: Estimator | None = None
_starter: Callable[[str], None] | None = None


def install(*, estimate: Estimator, start: Callable[[str], None]) -> None:
    """How a model is sized, (bytes needed, bytes free now) or None, and how its load starts everywhere.
    From then on a request for a registered model that is not loaded loads it (Runtime.get_engine)."""
    global _estimator, _starter
    _estimator, _starter = estimate, start
    set_missing_model_loader(load_missing)


async def load_missing(manager: ModelManagerClient, model: str | None) -> None:
    """Load `model` (None: the default) on demand and wait for it, as a chat's pick does (and Ollama's API
    does): one load however many requests ask. Raises the Unavailable or NotFound of load_on_demand."""
    if await asyncio.to_thread(load_on_demand, name=model, manager=manager) == ModelStatus.READY:
        return
    info = find(manager, model)
    name = info.name if info is not None else (model or "")
    await wait_loaded(name=name, bound=configured_wait(name), manager=manager)


def _estimate(info: ModelInfo) -> tuple[int, int] | None:
    """(bytes needed, bytes free on the device now), or None for a model whose files are not here."""
    return _estimator(info) if _estimator is not None else None


def start_everywhere(name: str) -> None:
    """The console's Load, as if an administrator pressed it: every replica loads the model."""
    if _starter is None:
        raise Unavailable(
            f"{name} is not loaded, and this server cannot load models on demand", code=UNAVAILABLE
        )
    # Conflict: a job for it began meanwhile (the sync, an administrator): it is on its way already.
    with contextlib.suppress(Conflict):
        _starter(name)


async def wait_loaded(
    *, name: str | None, bound: float, manager: ModelManagerClient | None = None, poll: float = 0.1
) -> None:
    """Wait until `name` is loaded. Unavailable naming it when its load fails or is refused, or when it
    is still loading after `bound` seconds ("model_loading")."""
    if manager is None:
        manager = await asyncio.to_thread(get_runtime().manager)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    while True:
        info = find(manager, name)
        if info is None:
            raise _unknown(name)
        if info.state == "loaded":
            return
        busy = info.state in LOADING_STATES or get_runtime().jobs.active_for(info.name) is not None
        if not busy:  # the load ended without the model: refused, failed, or unloaded as it finished
            raise Unavailable(_why_not_loaded(info), code=UNAVAILABLE)
        if loop.time() >= deadline:
            raise Unavailable(
                f"{info.name} is still loading; send your message again in a moment.",
                code="model_loading",
                retry_after=MODEL_RETRY_AFTER_S,
            )
        await asyncio.sleep(poll)


def _why_not_loaded(info: ModelInfo) -> str:
    if info.state == "failed" and _out_of_memory(info):
        return (
            f"{info.name} could not be loaded: there is not enough memory for it beside the loaded models. "
            "An administrator can unload one in the console."
        )
    if info.state == "failed":
        return failed_message(info.name)
    return f"{info.name} is not loaded (it was unloaded meanwhile); send again to load it."
