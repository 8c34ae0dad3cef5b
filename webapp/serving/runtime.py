"""The server's runtime: one object that owns the model manager, the limiter, the jobs and the services.

Daphne sends no ASGI lifespan, so `webapp.asgi` calls `start()` once the application is built (when the
settings autoload a model) and `webapp.serving.server` calls `stop()` as it shuts down; a test drives both
itself. Tests install a fresh Runtime per test rather than resetting module state.

Apps register what they need done at the runtime's edges (a load hook, a start hook) from their
AppConfig.ready; those registrations are wiring, made once per process, so they live beside the class.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings

from inference.api import EngineClient, ModelManagerClient
from webapp.serving.generation import GenerationService
from webapp.serving.health_log import HealthLog
from webapp.serving.heap import release_free_heap
from webapp.serving.jobs import ProcessJobs
from webapp.serving.limits import Limiter, RateLimiter
from webapp.serving.model_wait import ready_engine

if TYPE_CHECKING:
    from webapp.serving.model_access import Viewer

logger = logging.getLogger(__name__)

REAP_INTERVAL_SECONDS = 30.0

T = TypeVar("T")

_load_hooks: list[Callable[[EngineClient], None]] = []
_start_hooks: list[Callable[[], None]] = []


def register_load_hook(hook: Callable[[EngineClient], None]) -> None:
    """Work an app wants done right after any model loads, before requests reach it."""
    if hook not in _load_hooks:
        _load_hooks.append(hook)


def register_start_hook(hook: Callable[[], None]) -> None:
    """Work an app wants done when the server starts, before the default model loads (on that thread)."""
    if hook not in _start_hooks:
        _start_hooks.append(hook)


def run_load_hooks(engine: EngineClient) -> None:
    """The manager calls this for every engine it loads (load, restart after a change or a crash)."""
    for hook in _load_hooks:
        try:
            hook(engine)
        except Exception:
            logger.exception("A load hook failed for %s", engine.model_name)
    # Everything alive now (the models, their tokenizers' tables, the apps) lives as long as the server: out
    # of the collector's sight, a full collection walks only what requests allocate instead of holding the
    # GIL (and every stream) for ~300 ms over millions of long-lived objects. Unfrozen first, so that what
    # an unloaded model left in reference cycles is collected now.
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    release_free_heap()


def _build_manager() -> ModelManagerClient:
    from webapp.serving.engine import build_manager  # the composition root: torch comes in with it

    return build_manager(on_loaded=run_load_hooks)


def make_limiter() -> Limiter:
    """Redis when the replicas share one (REDIS_URL), so they enforce one limit; else this process."""
    if not settings.REDIS_URL:
        return RateLimiter()
    from webapp.serving.redis_limits import RedisRateLimiter  # redis-py: installed with the prod extra

    return RedisRateLimiter.from_url(settings.REDIS_URL)


class Runtime:
    def __init__(self, *, manager_factory: Callable[[], ModelManagerClient] = _build_manager) -> None:
        self._lock = threading.Lock()
        self._manager_factory = manager_factory
        self._manager: ModelManagerClient | None = None
        self._services: dict[type[Any], Any] = {}
        self._stopping = threading.Event()
        # Set once the start hooks ran and the start-up loads finished (or failed).
        self.started = threading.Event()
        self.threads: list[threading.Thread] = []
        self.limiter = make_limiter()
        self.jobs = ProcessJobs()
        self.health_log = HealthLog()
        self.generation = GenerationService(
            limiter=self.limiter, engine_for=self.get_engine, check_access=self.check_model_access
        )

    # ---- the model manager --------------------------------------------------------------------------

    def manager(self) -> ModelManagerClient:
        """The manager, built on first use (management commands and Celery never need one)."""
        with self._lock:
            if self._manager is None:
                self._manager = self._manager_factory()
            return self._manager

    def peek_manager(self) -> ModelManagerClient | None:
        """The manager if one exists; never creates it (health must not fake an engine into being)."""
        return self._manager

    def install_manager(self, manager: ModelManagerClient | None) -> None:
        """Use `manager` (tests install fakes); None forgets the current one without shutting it down."""
        with self._lock:
            self._manager = manager

    def check_model_access(self, viewer: Viewer, model: str | None) -> None:
        """NotFound unless `viewer` may use `model` (blocking: reads the model's allowed groups)."""
        from webapp.serving.model_access import ensure_may_use  # models: only once Django's apps are ready

        ensure_may_use(viewer, self.manager(), model)

    async def get_engine(self, model: str | None = None) -> EngineClient:
        """The loaded engine for `model` (None = default), waited for while it loads (model_wait); a
        registered model that is not loaded is loaded first, memory allowing. Raises UnknownModelError,
        or Unavailable naming the model and why it cannot serve (past the wait, a failed or refused load)."""
        manager = self._manager if self._manager is not None else await asyncio.to_thread(self.manager)
        return await ready_engine(manager, model)

    def service(self, cls: type[T], factory: Callable[[], T] | None = None) -> T:
        """The runtime's one instance of an app's service (chat replies, the dashboard's sampler)."""
        with self._lock:
            if cls not in self._services:
                self._services[cls] = (factory or cls)()
            return self._services[cls]

    def peek_service(self, cls: type[T]) -> T | None:
        """The app's service if something made it, without making it."""
        with self._lock:
            found: T | None = self._services.get(cls)
            return found

    def close_services(self) -> None:
        """Close every service that holds something outside the process's memory (children, files)."""
        with self._lock:
            services = list(self._services.values())
        for service in reversed(services):
            close = getattr(service, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    logger.exception("Closing %s failed", type(service).__name__)

    # ---- start and stop -----------------------------------------------------------------------------

    def start(self, *, reap_interval: float = REAP_INTERVAL_SECONDS) -> None:
        """Run the start hooks and load the default model in the background; unload idle models on a timer."""
        # Import the engine (torch, transformers) on the calling thread: transformers' lazy modules are not
        # safe to import from two threads at once, and requests may import them while the model loads.
        self.manager()
        loader = threading.Thread(target=self._start_in_background, name="mooncake-autoload", daemon=True)
        reaper = threading.Thread(
            target=self._reap_idle, args=(reap_interval,), name="mooncake-reaper", daemon=True
        )
        self.threads += [loader, reaper]
        loader.start()
        reaper.start()

    def _start_in_background(self) -> None:
        from django.db import connections

        try:
            for hook in _start_hooks:
                try:
                    hook()
                except Exception:
                    logger.exception("A start hook failed; the server starts without it")
            self._load_at_start()
        finally:
            connections.close_all()  # this thread's connections, if a hook or the check opened one
            self.started.set()

    def _load_at_start(self) -> None:
        """Load the default model (with a models list in mooncake.yaml: every listed one, in order). A model
        that fails, or that the memory plan says would not fit, leaves the others and the server running."""
        from webapp.core.models import ModelRegistration  # models: after the apps are ready
        from webapp.serving.memory_check import over_budget, start_names

        try:
            manager = self.manager()
            names = start_names(manager)
            if not names:
                logger.warning("No default model is configured; nothing to load.")
                return
            kept = set(
                ModelRegistration.objects.filter(name__in=names, desired_state="unloaded").values_list(
                    "name", flat=True
                )
            )
            for name in kept:
                logger.info("The model %s stays unloaded, as an admin left it", name)
            names = [name for name in names if name not in kept]
        except Exception:
            # /health reports the failure from the manager's state; the server stays up for the console.
            logger.exception("Preparing the start-up loads failed")
            return
        try:
            skipped = over_budget(manager, names)
        except Exception:  # the plan is advice: without it, the loads meet the budget themselves
            logger.exception("Planning the models' memory failed; loading them unplanned")
            skipped = set()
        for name in names:
            if name in skipped:
                continue
            try:
                logger.info("Loading the model %s", name)
                manager.load(name)
                logger.info("Model %s is ready", name)
            except Exception:
                logger.exception("Loading the model %s failed", name)

    def _reap_idle(self, interval: float) -> None:
        while not self._stopping.wait(interval):
            manager = self._manager
            if manager is None:
                continue
            try:
                for name in manager.reap_idle():
                    logger.info("Unloaded idle model %s (keep_alive elapsed)", name)
            except Exception:
                logger.exception("Reaping idle models failed")

    def busy(self) -> int:
        """Requests running or waiting across loaded engines (what a draining server waits for)."""
        manager = self._manager
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

    def stop(self, *, drain_timeout: float = 0.0, load_wait: float = 0.0) -> list[str]:
        """Stop the timer, finish the jobs, then unload every model, letting running requests finish
        within `drain_timeout` seconds. A model still loading is waited for (up to `load_wait` seconds) and
        unloaded too: its loader thread is inside torch, which must not be so when the interpreter exits.
        Returns the models still loading at the end (none, normally). Safe to call more than once."""
        self._stopping.set()
        self.jobs.wait_all(timeout=load_wait)
        self.close_services()
        gc.unfreeze()  # what the models leave is collected as they unload
        manager = self._manager
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


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime() -> Runtime:
    """This process's runtime (created on first use)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime()
        return _runtime


def install_runtime(runtime: Runtime | None) -> Runtime | None:
    """Make `runtime` the process's runtime and return the previous one (tests: a fresh one per test)."""
    global _runtime
    with _runtime_lock:
        previous, _runtime = _runtime, runtime
        return previous
