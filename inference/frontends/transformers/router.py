"""BatchingRunner: transformers' continuous batching manager, kept running, with its results routed.

transformers' ContinuousBatchingManager steps the model in its own thread and puts every result on one
queue. One thread here drains it and delivers each result to the asyncio queue of the request it belongs
to; results of a request already cancelled are dropped, so nothing piles up.

Any exception inside a step ends transformers' whole loop and fails every request in it. The weights stay
loaded, so the runner fails those requests and starts a fresh manager at once: one bad batch costs its own
requests, not the model. A loop that keeps dying (RESTARTS_ALLOWED within RESTART_WINDOW_S) is reported
through `on_dead`, and the model manager's supervision takes over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inference.errors import RequestFailedError

logger = logging.getLogger(__name__)

RESTARTS_ALLOWED = 3
RESTART_WINDOW_S = 60.0

# What a request's queue receives: (choice index, tokens generated so far, finished, error), a marker
# object, or an exception to raise.
Result = tuple[int, list[int], bool, str | None]


@dataclass(slots=True)
class Route:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Any]
    index: int


class BatchingRunner:
    def __init__(self, make_manager: Callable[[], Any], *, on_dead: Callable[[str], None], name: str) -> None:
        self._make_manager = make_manager
        self._on_dead = on_dead
        self.manager = make_manager()
        self.restarts = 0
        self._recent_restarts: deque[float] = deque(maxlen=RESTARTS_ALLOWED)
        self._lock = threading.Lock()
        self._routes: dict[str, Route] = {}
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.manager.start()
        self._thread.start()

    def submit(self, sub_id: str, ids: list[int], route: Route, **request: Any) -> bool:
        """Route `sub_id`'s results to `route` and queue it; False if the manager takes no requests."""
        with self._lock:
            self._routes[sub_id] = route
        return self.manager.add_request(ids, request_id=sub_id, streaming=True, **request) is not None

    def cancel(self, sub_ids: list[str]) -> None:
        """Stop routing `sub_ids` and cancel those still running there (their pages are freed)."""
        with self._lock:
            live = [sub_id for sub_id in sub_ids if self._routes.pop(sub_id, None) is not None]
        for sub_id in live:
            self.manager.cancel_request(sub_id)

    def first_route(self, sub_ids: list[str]) -> Route | None:
        with self._lock:
            return next((self._routes[s] for s in sub_ids if s in self._routes), None)

    def fail_all(self, error: BaseException) -> None:
        """Every routed request gets `error`, and no result reaches it after."""
        with self._lock:
            routes = list(self._routes.values())
            self._routes.clear()
        for route in routes:
            deliver(route, error)

    def kv_usage(self) -> float:
        # transformers exposes no public figure: read its page pool, and say 0 should that move.
        try:
            pool = self.manager.batch_processor.cache.pool
            return float(1.0 - pool.num_free_sectors / max(1, pool.num_sectors))
        except AttributeError:
            return 0.0

    def close(self) -> None:
        self._closed.set()  # first: a manager stopping from here on is no failure
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self.manager.is_running():
            self.manager.stop(block=True, timeout=30, hard_stop=True)

    def _run(self) -> None:
        while not self._closed.is_set():
            result = self.manager.get_result(timeout=0.1)
            if result is None:
                if not self.manager.is_running() and not self._closed.is_set() and not self._restart():
                    return
                continue
            with self._lock:
                route = self._routes.get(result.request_id)
            if route is not None:
                item: Result = (
                    route.index,
                    list(result.generated_tokens),
                    result.is_finished(),
                    result.error,
                )
                deliver(route, item)

    def _restart(self) -> bool:
        """The loop stopped on its own: fail what ran in it, then start a fresh one if allowed."""
        fatal = self.manager.background_thread_status.fatal_error
        reason = f"transformers' batching loop stopped: {fatal or 'without an error'}"
        logger.error("%s", reason)
        self.fail_all(RequestFailedError("The engine could not complete this request."))
        now = time.monotonic()
        if (
            len(self._recent_restarts) == RESTARTS_ALLOWED
            and now - self._recent_restarts[0] < RESTART_WINDOW_S
        ):
            self._on_dead(f"{reason} ({RESTARTS_ALLOWED + 1} times within {RESTART_WINDOW_S:.0f} s)")
            return False
        self._recent_restarts.append(now)
        with contextlib.suppress(Exception):  # restores the model's attention setting; the loop is gone
            self.manager.stop(block=True, timeout=5)
        self.manager = self._make_manager()
        self.manager.start()
        self.restarts += 1
        logger.warning("Started a fresh transformers batching loop (restart %d)", self.restarts)
        return True


def deliver(route: Route, item: object) -> None:
    with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody is listening
        route.loop.call_soon_threadsafe(route.queue.put_nowait, item)
