"""Supervision for ModelManager: an engine whose thread dies is dropped at once (its model reads
"restarting") and loaded again after a back-off that doubles with each death; past `max_restarts` deaths
within `restart_window_s` the model stays "failed" until someone loads it again.

A mixin, not a separate object: it changes the manager's entries under the manager's one lock.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from inference.api import ManagedEngine

logger = logging.getLogger("inference.manager.model_manager")


def free_torch_memory() -> None:
    """Return cached allocator memory after an engine is dropped (matters on CUDA only)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Supervision:
    # Provided by ModelManager.
    _lock: threading.RLock
    max_restarts: int
    restart_window_s: float
    restart_backoff_s: float

    def _load_locked(self, entry: Any) -> ManagedEngine:
        raise NotImplementedError

    def _on_engine_death(self, entry: Any, engine: ManagedEngine) -> None:
        """On the dying engine's thread: drop it now, restart it from another thread after a back-off."""
        error = engine.health().error or "the engine stopped"
        with self._lock:
            if entry.engine is not engine:  # unloaded or replaced meanwhile
                return
            entry.engine = None
            entry.forget_figures()
            entry.served_before += engine.stats().requests_total
            delay = self._count_death(entry, f"the engine died ({error})")
        logger.error("Engine for %s died: %s", entry.info.name, error)
        threading.Thread(
            target=self._restart, args=(entry, engine, delay), name=f"mooncake-restart-{entry.info.name}"
        ).start()

    def _count_death(self, entry: Any, error: str) -> float | None:
        """With self._lock held: record a death; the back-off before the next try, or None to give up."""
        now = time.monotonic()
        entry.deaths = [t for t in entry.deaths if now - t < self.restart_window_s] + [now]
        if len(entry.deaths) > self.max_restarts:
            entry.info.state = "failed"
            entry.info.error = (
                f"{error}; {len(entry.deaths)} failures within {self.restart_window_s:.0f} s, "
                "so it is not restarted again automatically"
            )
            return None
        entry.info.state, entry.info.error = "restarting", f"{error}; restarting"
        return self.restart_backoff_s * 2 ** (len(entry.deaths) - 1)

    def _restart(self, entry: Any, dead: ManagedEngine, delay: float | None) -> None:
        dead.shutdown()  # joins its (finished) thread; nothing else holds it
        del dead
        gc.collect()
        free_torch_memory()
        while delay is not None:
            time.sleep(delay)
            with entry.load_lock:
                with self._lock:
                    if entry.info.state != "restarting" or entry.engine is not None:
                        return  # unloaded, reconfigured or loaded by someone else meanwhile
                try:
                    self._load_locked(entry)
                except Exception as exc:
                    with self._lock:
                        delay = self._count_death(entry, f"restarting failed ({type(exc).__name__}: {exc})")
                    logger.exception("Restarting %s failed", entry.info.name)
                    continue
                with self._lock:
                    entry.info.restarts += 1
                logger.info("Restarted the engine for %s", entry.info.name)
                return
