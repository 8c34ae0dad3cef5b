"""Eviction for ModelManager: a memory budget kept by unloading idle models, least recently used first, and
idle keep-alive. A mixin: it reads the manager's entries under the manager's one lock.
"""

from __future__ import annotations

import builtins
import threading
import time
from typing import Any

from inference.errors import InsufficientMemoryError


def _is_idle(engine: Any) -> bool:
    stats = engine.stats()
    return int(stats.num_running) + int(stats.num_waiting) == 0


class Eviction:
    # Provided by ModelManager.
    _lock: threading.RLock
    _entries: dict[str, Any]
    memory_budget_bytes: int | None
    evict_lru: bool

    def unload(self, name: str, *, drain_timeout: float = 0.0) -> None:
        raise NotImplementedError

    def reap_idle(self, now: float | None = None) -> builtins.list[str]:
        """Unload idle models past their keep_alive_seconds; the web layer calls this periodically."""
        now = time.time() if now is None else now
        with self._lock:
            idle = [
                name
                for name, e in self._entries.items()
                if e.engine is not None
                and e.info.keep_alive_seconds is not None
                and now - (e.info.last_used or now) > e.info.keep_alive_seconds
                and _is_idle(e.engine)
            ]
        for name in idle:
            self.unload(name)
        return idle

    def _make_room(self, entry: Any, needed: int) -> None:
        """Evict idle loaded models, least recently used first, until `needed` bytes fit the budget."""
        budget = self.memory_budget_bytes
        if budget is None or needed <= 0:
            return
        while True:
            with self._lock:
                others = [e for e in self._entries.values() if e is not entry and e.engine is not None]
                available = budget - sum(e.info.memory_bytes or 0 for e in others)
                if needed <= available:
                    return
                candidates = sorted(
                    (e for e in others if e.engine is not None and _is_idle(e.engine)),
                    key=lambda e: e.info.last_used or 0.0,
                )
            if not self.evict_lru or not candidates:
                raise InsufficientMemoryError(
                    f"model {entry.info.name!r} needs {needed} bytes but only {max(available, 0)} of the "
                    f"{budget}-byte budget are available"
                    + ("" if self.evict_lru else " (LRU eviction is off)")
                    + "; raise the memory budget (MOONCAKE_MEMORY_BUDGET_BYTES or the console's Tuning page),"
                    " unload another model, or lower this one's max_model_len or kv_cache_memory_bytes"
                )
            self.unload(candidates[0].info.name)
