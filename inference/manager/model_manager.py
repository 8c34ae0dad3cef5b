"""ModelManager: several models in one process, a memory budget with LRU eviction, idle keep-alive.

It also supervises: an engine whose thread dies is dropped at once (its model reads "restarting") and
loaded again after a back-off that doubles with each death; past `max_restarts` deaths within
`restart_window_s` the model stays "failed" until someone loads it again. A reconfigure restarts a loaded
model gracefully: drain, then swap (inference.manager.handover).

Supervision (death, back-off, restart), eviction (budget, keep-alive) and progress (a load's steps, a
download's bytes) are mixins of their own modules, inference.manager.supervision, inference.manager.eviction
and inference.manager.load_progress, on the same entries and lock.
"""

from __future__ import annotations

import builtins
import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from inference.api import ManagedEngine
from inference.config import EngineConfig
from inference.errors import EngineDeadError, InsufficientMemoryError, NoModelLoadedError, UnknownModelError
from inference.manager.eviction import Eviction
from inference.manager.handover import adopt_all, hand_over
from inference.manager.load_progress import LoadReporting
from inference.manager.supervision import Supervision, free_torch_memory
from inference.status import ModelInfo, ModelState

# ModelInfo and ModelState: re-exported from their old home.
__all__ = ["ModelInfo", "ModelManager", "ModelState", "free_torch_memory"]

logger = logging.getLogger(__name__)


def _start_native(config: EngineConfig) -> ManagedEngine:
    """The default engine factory: our engine in this process (a server passes the registry's start)."""
    from inference.frontends.local.async_engine import AsyncEngine

    return AsyncEngine.start(config)


@dataclass(slots=True)
class _Entry:
    config: EngineConfig
    info: ModelInfo
    engine: ManagedEngine | None = None
    served_before: int = 0  # requests served by earlier loads of this model
    load_lock: threading.Lock = field(default_factory=threading.Lock)
    deaths: list[float] = field(default_factory=list)  # monotonic times, within the restart window
    # The last load's footprint: sizes the eviction before a reload, after info's figures were cleared.
    last_memory_bytes: int | None = None

    def forget_figures(self) -> None:
        """Once the engine is gone its memory and KV figures describe nothing held: keep them off the info."""
        self.info.memory_bytes = self.info.kv_capacity_tokens = None


class ModelManager(Supervision, Eviction, LoadReporting):
    """Thread-safe. `load` blocks (call it via asyncio.to_thread from async code)."""

    def __init__(
        self,
        *,
        memory_budget_bytes: int | None = None,
        evict_lru: bool = True,
        engine_factory: Callable[[EngineConfig], ManagedEngine] | None = None,
        max_restarts: int = 3,
        restart_window_s: float = 600.0,
        restart_backoff_s: float = 1.0,
        on_loaded: Callable[[ManagedEngine], None] | None = None,
    ) -> None:
        if memory_budget_bytes is not None and memory_budget_bytes <= 0:
            raise ValueError(f"memory_budget_bytes must be > 0, got {memory_budget_bytes}")
        if max_restarts < 0 or restart_window_s <= 0 or restart_backoff_s < 0:
            raise ValueError("max_restarts and restart_backoff_s must be >= 0, restart_window_s > 0")
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.restart_backoff_s = restart_backoff_s
        # Runs on every engine this manager loads (load, reconfigure, automatic restart) before the model
        # reads "loaded", so work it does (warming caches) never competes with requests.
        self._on_loaded = on_loaded
        self.memory_budget_bytes = memory_budget_bytes
        self.evict_lru = evict_lru
        self._factory = engine_factory or _start_native
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._aliases: dict[str, str] = {}
        self.default_name: str | None = None

    # ---- registry ---------------------------------------------------------------------------------
    def register(
        self,
        name: str,
        config: EngineConfig,
        *,
        aliases: list[str] | None = None,
        keep_alive_seconds: float | None = None,
    ) -> ModelInfo:
        aliases, keep = list(aliases or []), keep_alive_seconds
        if keep_alive_seconds is not None and keep_alive_seconds <= 0:
            raise ValueError(f"keep_alive_seconds must be > 0, got {keep_alive_seconds}")
        with self._lock:
            for key in [name, *aliases]:
                if key in self._entries or key in self._aliases:
                    raise ValueError(f"model name or alias {key!r} is already registered")
            info = ModelInfo(name, aliases, config.model, task=config.task, keep_alive_seconds=keep)
            self._entries[name] = _Entry(config, info)
            self._aliases.update(dict.fromkeys(aliases, name))
            if self.default_name is None:
                self.default_name = name
            return self._info(name)

    def unregister(self, name: str) -> None:
        name = self.resolve(name)
        self.unload(name)
        with self._lock:
            entry = self._entries.pop(name)
            for alias in entry.info.aliases:
                self._aliases.pop(alias, None)
            if self.default_name == name:
                self.default_name = next(iter(self._entries), None)

    def resolve(self, name: str) -> str:
        with self._lock:
            if name in self._entries:
                return name
            if name in self._aliases:
                return self._aliases[name]
        raise UnknownModelError(f"model {name!r} does not exist")

    def set_default(self, name: str) -> None:
        self.default_name = self.resolve(name)

    def list(self) -> list[ModelInfo]:
        with self._lock:
            return [self._info(name) for name in self._entries]

    # ---- loading ----------------------------------------------------------------------------------
    def reconfigure(
        self,
        name: str,
        config: EngineConfig,
        *,
        aliases: builtins.list[str] | None = None,
        keep_alive_seconds: float | None = None,
        drain_timeout: float = 0.0,
    ) -> None:
        """Swap a model's config; a loaded model restarts gracefully and keeps its queued requests.

        New requests get NoModelLoadedError (state "loading") meanwhile; running ones drain for up to
        drain_timeout and are then aborted; ones that never started move to the new engine, or get
        EngineDeadError (PromptTooLongError when their prompt no longer fits) if they cannot run there.
        """
        aliases = list(aliases or [])
        if keep_alive_seconds is not None and keep_alive_seconds <= 0:
            raise ValueError(f"keep_alive_seconds must be > 0, got {keep_alive_seconds}")
        name = self.resolve(name)
        entry = self._entries[name]
        with entry.load_lock:
            with self._lock:
                for key in [name, *aliases]:
                    if self._aliases.get(key, name) != name or (key != name and key in self._entries):
                        raise ValueError(f"model name or alias {key!r} is already registered")
                for alias in entry.info.aliases:
                    self._aliases.pop(alias, None)
                self._aliases.update(dict.fromkeys(aliases, name))
                entry.config = config
                entry.info = replace(
                    entry.info, aliases=aliases, source=config.model, keep_alive_seconds=keep_alive_seconds
                )
                engine, entry.engine = entry.engine, None
                if engine is None:
                    if entry.info.state == "failed":  # the new config deserves a fresh try
                        entry.info.state, entry.info.error = "available", None
                    return
                entry.info.state, entry.info.error = "loading", None
                entry.forget_figures()
            moving = hand_over(engine, drain_timeout=drain_timeout)
            with self._lock:
                entry.served_before += engine.stats().requests_total
            del engine
            gc.collect()
            free_torch_memory()
            try:
                new_engine = self._load_locked(entry)
            except Exception as exc:
                for submission in moving:
                    submission.fail(EngineDeadError(f"model {name!r} failed to restart: {exc}"))
                raise
            adopt_all(new_engine, moving)

    def load(self, name: str) -> ManagedEngine:
        entry = self._entries[self.resolve(name)]
        with entry.load_lock:
            if entry.engine is not None:
                self.touch(entry.info.name)
                return entry.engine
            return self._load_locked(entry)

    def _load_locked(self, entry: _Entry) -> ManagedEngine:
        """Load entry's engine; the caller holds entry.load_lock."""
        with self._lock:
            entry.info.state, entry.info.error = "loading", None
            entry.info.download_bytes_done = entry.info.download_bytes_total = None
            entry.info.load_phase = entry.info.load_done = entry.info.load_total = None
        try:
            self._make_room(entry, entry.last_memory_bytes or 0)  # known from an earlier load
            with self.reporting_load(entry):
                engine = self._factory(entry.config)
            try:
                self._make_room(entry, engine.memory_bytes)
            except InsufficientMemoryError:
                engine.shutdown()
                raise
        except Exception as exc:
            with self._lock:
                entry.info.state, entry.info.error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        if self._on_loaded is not None:
            try:
                self._on_loaded(engine)
            except Exception:  # warming is an optimisation: the model serves without it
                logger.exception("The on_loaded hook failed for %s", entry.info.name)
        with self._lock:
            entry.engine = engine
            entry.last_memory_bytes = engine.memory_bytes
            entry.info = replace(
                entry.info,
                state="loaded",
                download_bytes_done=None,
                download_bytes_total=None,
                load_phase=None,
                memory_bytes=engine.memory_bytes,
                kv_capacity_tokens=engine.kv_capacity_tokens,
                last_used=time.time(),
                **engine.model_details,
            )
        engine.set_on_death(lambda dead: self._on_engine_death(entry, dead))
        return engine

    def unload(self, name: str, *, drain_timeout: float = 0.0) -> None:
        entry = self._entries[self.resolve(name)]
        with self._lock:
            engine, entry.engine = entry.engine, None
            if engine is None:
                if entry.info.state == "restarting":  # an unload cancels the pending restart
                    entry.info.state, entry.info.error = "available", None
                return
            entry.info.state = "unloading"
            entry.served_before += engine.stats().requests_total
        engine.shutdown(drain_timeout=drain_timeout)
        del engine
        gc.collect()
        free_torch_memory()
        with self._lock:
            entry.info.state = "available"
            entry.forget_figures()

    def get(self, name: str | None = None) -> ManagedEngine:
        """The loaded engine for name (None: the default); counts as use for LRU and keep-alive."""
        engine = self.peek(name)
        self.touch(name if name is not None else self._default_or_raise())
        return engine

    def peek(self, name: str | None = None) -> ManagedEngine:
        """Like get(), without counting as use: for health probes, metrics scrapes and dashboards."""
        entry = self._entries[self.resolve(name if name is not None else self._default_or_raise())]
        engine = entry.engine
        if engine is None:
            raise NoModelLoadedError(f"model {entry.info.name!r} is not loaded (state: {entry.info.state})")
        return engine

    def _default_or_raise(self) -> str:
        if self.default_name is None:
            raise NoModelLoadedError("no default model is configured")
        return self.default_name

    def touch(self, name: str) -> None:
        with self._lock:
            self._entries[self.resolve(name)].info.last_used = time.time()

    # ---- internals --------------------------------------------------------------------------------
    def _info(self, name: str) -> ModelInfo:
        entry = self._entries[name]
        served = entry.served_before + (entry.engine.stats().requests_total if entry.engine else 0)
        return replace(
            entry.info,
            aliases=list(entry.info.aliases),
            requests_served=served,
            is_default=name == self.default_name,
        )
