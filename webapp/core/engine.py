"""The process-wide model manager: built from settings.MOONCAKE, loaded in the background at server start.

The composition root: the one web module that constructs the engine side. Everything else, here too,
uses the torch-free contract in `inference.api`; the engine implementation (and so torch) is imported
only when a manager is built, so management commands and Celery workers, which never run models, start
without it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from inference.api import EngineClient, EngineConfig, ModelManagerClient
from webapp.core.engine_config import ResolvedEngine, base_layers, merge_layers, resolve_engine

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
REAP_INTERVAL_SECONDS = 30.0

_lock = threading.Lock()
_manager: ModelManagerClient | None = None


def engine_config_dict(mooncake: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Defaults, the environment's engine settings and the yaml `model` and `engine` sections, merged as
    `EngineConfig.from_dict` takes them (webapp.core.engine_config resolves them, sources and all)."""
    return {key: sourced.value for key, sourced in merge_layers(base_layers(mooncake)).items()}


def resolve_builtin_engine(mooncake: dict[str, dict[str, Any]]) -> ResolvedEngine:
    """The model mooncake.yaml serves, as the server registers it at start (no console layer yet)."""
    return resolve_engine(base_layers(mooncake))


def build_engine_config(mooncake: dict[str, dict[str, Any]]) -> EngineConfig:
    return resolve_builtin_engine(mooncake).config


def served_model_name(mooncake: dict[str, dict[str, Any]]) -> str:
    """The name API clients use: `model.name`, else derived from the model's source."""
    model = mooncake.get("model", {})
    explicit = model.get("name")
    if explicit:
        return str(explicit)
    source = str(model.get("model_id") or model.get("model") or "default")
    if source == "default":
        return DEFAULT_MODEL_NAME
    path = Path(source)
    return path.stem if path.suffix == ".gguf" else path.name or source


def _build_manager() -> ModelManagerClient:
    # Function-local on purpose: this is where the web app builds the engine side (torch); see the docstring.
    from inference.manager import ModelManager

    budget = settings.MOONCAKE_MEMORY_BUDGET_BYTES or None
    manager = ModelManager(memory_budget_bytes=budget, on_loaded=run_load_hooks)
    mooncake = settings.MOONCAKE
    name = served_model_name(mooncake)
    aliases = [str(a) for a in mooncake.get("model", {}).get("aliases", [])]
    if name != "default" and "default" not in aliases:
        aliases.append("default")
    manager.register(name, build_engine_config(mooncake), aliases=aliases)
    manager.set_default(name)
    return manager


def peek_manager() -> ModelManagerClient | None:
    """The manager if one exists; never creates it (health must not fake an engine into being)."""
    return _manager


def get_manager() -> ModelManagerClient:
    global _manager
    with _lock:
        if _manager is None:
            _manager = _build_manager()
        return _manager


def set_manager(manager: ModelManagerClient | None) -> None:
    """Install a manager (tests install a fake); None forgets the current one without shutting it down."""
    global _manager
    with _lock:
        _manager = manager


async def get_engine(model: str | None = None) -> EngineClient:
    """The loaded engine for `model` (None = default); raises UnknownModelError / NoModelLoadedError."""
    manager = await asyncio.to_thread(get_manager) if _manager is None else _manager
    return manager.get(model)


# Work an app wants done right after a model loads, before requests reach it (the API builds its grammar
# view of the tokenizer, which otherwise holds the GIL, and so every stream, on the first grammar request).
_load_hooks: list[Callable[[EngineClient], None]] = []


def register_load_hook(hook: Callable[[EngineClient], None]) -> None:
    if hook not in _load_hooks:
        _load_hooks.append(hook)


def run_load_hooks(engine: EngineClient) -> None:
    """The manager calls this for every engine it loads (load, restart after a change or a crash)."""
    for hook in _load_hooks:
        try:
            hook(engine)
        except Exception:
            logger.exception("A load hook failed for %s", engine.model_name)


def _load_default() -> None:
    try:
        manager = get_manager()
        name = manager.default_name
        if name is None:
            logger.warning("No default model is configured; nothing to load.")
            return
        logger.info("Loading the default model %s", name)
        manager.load(name)
        logger.info("Default model %s is ready", name)
    except Exception:
        # /health reports the failure from the manager's state; the server stays up for the console.
        logger.exception("Loading the default model failed")


def start_default_model_in_background() -> threading.Thread:
    # Import the engine (torch, transformers) on the calling thread: transformers' lazy modules are not
    # safe to import from two threads at once, and requests may import them while the model loads.
    # Function-local: the composition root alone imports the engine side, and only when it is needed.
    import inference.manager  # noqa: F401

    thread = threading.Thread(target=_load_default, name="mooncake-autoload", daemon=True)
    thread.start()
    return thread


def _reap_idle_forever(interval: float) -> None:
    while True:
        time.sleep(interval)
        manager = _manager
        if manager is None:
            continue
        try:
            for name in manager.reap_idle():
                logger.info("Unloaded idle model %s (keep_alive elapsed)", name)
        except Exception:
            logger.exception("Reaping idle models failed")


def start_idle_reaper(interval: float = REAP_INTERVAL_SECONDS) -> threading.Thread:
    """Unload models whose keep_alive has elapsed; the manager does not run a timer of its own."""
    thread = threading.Thread(
        target=_reap_idle_forever, args=(interval,), name="mooncake-reaper", daemon=True
    )
    thread.start()
    return thread


def engines_busy() -> int:
    """Requests running or waiting across loaded engines (what a draining server waits for)."""
    manager = _manager
    if manager is None:
        return 0
    busy = 0
    for info in manager.list():
        if info.state != "loaded":
            continue
        try:
            stats = manager.peek(info.name).stats()
        except Exception:
            logger.debug("Engine %s vanished while counting busy requests", info.name, exc_info=True)
            continue
        busy += int(stats.num_running) + int(stats.num_waiting)
    return busy


def shutdown_engines(*, drain_timeout: float = 0.0, load_wait: float = 0.0) -> list[str]:
    """Unload every loaded model, letting running requests finish within `drain_timeout` seconds.

    A model still loading is waited for (up to `load_wait` seconds) and then unloaded too: its loader
    thread is inside torch, which must not be the case when the interpreter exits. Returns the models
    still loading at the end (none, normally).
    """
    manager = _manager
    if manager is None:
        return []
    deadline = time.monotonic() + load_wait
    while any(info.state == "loading" for info in manager.list()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for info in manager.list():
        if info.state in ("loaded", "loading"):
            try:
                manager.unload(info.name, drain_timeout=drain_timeout)
            except Exception:
                logger.exception("Unloading %s failed", info.name)
    return [info.name for info in manager.list() if info.state == "loading"]
