"""EmbeddingBatcher: one thread per embedding model that runs many callers' inputs together.

Callers submit requests (each a list of token-id rows) from any thread; the worker takes rows oldest
request first into one right-padded batch, bounded by max_batch_tokens padded tokens (rows x longest row)
and max_batch_rows, runs it, and hands each request its vectors once all its rows are done. While a batch
runs, new requests queue and go together into the next one: the busier the model, the bigger its batches.
The queue of waiting requests is bounded (QueueFullError past max_queue_len); a dropped request (its caller
went away) leaves the queue at once and its rows still waiting are never run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from inference.errors import EngineDeadError, QueueFullError, RequestFailedError
from inference.metrics import EngineStats, MetricsCollector
from inference.status import EngineHealth

logger = logging.getLogger(__name__)

Vectors = list[list[float]]
RunBatch = Callable[[list[list[int]]], Vectors]


@dataclass(eq=False, slots=True)
class EmbedRequest:
    """One caller's inputs; `deliver` gets the vectors, in input order, or the error that ended them."""

    inputs: list[list[int]]
    deliver: Callable[[Vectors | BaseException], None]
    arrival: float = field(default_factory=time.monotonic)
    results: list[list[float] | None] = field(default_factory=list)
    handed_out: int = 0  # rows already taken into a batch
    finished_rows: int = 0
    dropped: bool = False
    started: float | None = None

    def __post_init__(self) -> None:
        self.results = [None] * len(self.inputs)


class EmbeddingBatcher:
    def __init__(
        self,
        run: RunBatch,
        *,
        max_batch_tokens: int,
        max_batch_rows: int,
        max_queue_len: int,
        name: str = "embedding",
    ) -> None:
        self._run = run
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_rows = max_batch_rows
        self.max_queue_len = max_queue_len
        self.health = EngineHealth("ready")
        self._cond = threading.Condition()
        self._waiting: deque[EmbedRequest] = deque()  # with rows not yet in a batch
        self._running: set[EmbedRequest] = set()  # every row handed out, some not finished
        self._metrics = MetricsCollector()
        self._accepting = True
        self._stop = False
        self._on_death: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._loop, name=f"mooncake-embed-{name}", daemon=True)
        self._thread.start()

    # ---- from callers' threads ----------------------------------------------------------------------
    def check_open(self) -> None:
        if self.health.state == "dead" or not self._accepting:
            raise EngineDeadError(self.health.error or "the engine is shut down")

    def submit(self, request: EmbedRequest) -> None:
        with self._cond:
            self.check_open()
            if len(self._waiting) >= self.max_queue_len:
                raise QueueFullError(
                    f"{len(self._waiting)} embedding requests are already waiting; retry shortly (the "
                    "server's max_queue_len bounds the queue)"
                )
            self._waiting.append(request)
            self._cond.notify()

    def drop(self, request: EmbedRequest) -> None:
        """The caller is gone: forget the request; rows of it already running finish unseen."""
        with self._cond:
            request.dropped = True
            if request in self._waiting:
                self._waiting.remove(request)
            self._running.discard(request)

    def stats(self) -> EngineStats:
        with self._cond:
            return self._metrics.snapshot(num_running=len(self._running), num_waiting=len(self._waiting))

    def busy(self) -> bool:
        with self._cond:
            return bool(self._waiting or self._running)

    def set_on_death(self, callback: Callable[[], None]) -> None:
        with self._cond:
            dead = self.health.state == "dead"
            self._on_death = None if dead else callback
        if dead:
            callback()

    def stop_accepting(self) -> None:
        with self._cond:
            self._accepting = False

    def stop(self, *, drain_timeout: float = 0.0) -> None:
        """Refuse new requests, let queued ones finish for up to drain_timeout seconds, fail the rest."""
        self.stop_accepting()
        deadline = time.monotonic() + drain_timeout
        while self.busy() and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._cond:
            self._stop = True
            left = self._take_all()
            self._cond.notify()
        for request in left:
            request.deliver(EngineDeadError("the engine is shut down"))
        self._thread.join(timeout=30)

    # ---- the worker -----------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._waiting and not self._stop:
                        self._cond.wait()
                    if self._stop:
                        return
                    rows, owners = self._take()
                self._run_one(rows, owners)
        except BaseException as exc:  # the thread itself broke: nothing will serve these requests
            logger.exception("The embedding thread died")
            self._die(f"the embedding engine crashed: {type(exc).__name__}")

    def _take(self) -> tuple[list[list[int]], list[tuple[EmbedRequest, int]]]:
        """The next batch's rows, oldest request first, with the (request, index) each belongs to."""
        rows: list[list[int]] = []
        owners: list[tuple[EmbedRequest, int]] = []
        longest = 0
        while self._waiting:
            request = self._waiting[0]
            if request.started is None:
                request.started = time.monotonic()
            while request.handed_out < len(request.inputs):
                ids = request.inputs[request.handed_out]
                wider = max(longest, len(ids))
                if rows and (
                    wider * (len(rows) + 1) > self.max_batch_tokens or len(rows) >= self.max_batch_rows
                ):
                    return rows, owners
                rows.append(ids)
                owners.append((request, request.handed_out))
                longest = wider
                request.handed_out += 1
            self._running.add(self._waiting.popleft())
        return rows, owners

    def _run_one(self, rows: list[list[int]], owners: list[tuple[EmbedRequest, int]]) -> None:
        try:
            vectors = self._run(rows)
        except Exception:
            logger.exception("An embedding batch of %d rows failed", len(rows))
            self._fail({request for request, _ in owners})
            return
        done: list[EmbedRequest] = []
        with self._cond:
            for (request, index), vector in zip(owners, vectors, strict=True):
                request.results[index] = vector
                request.finished_rows += 1
                if request.finished_rows == len(request.inputs):
                    self._running.discard(request)
                    if not request.dropped:
                        done.append(request)
                        self._record(request)
        for request in done:
            request.deliver([vector for vector in request.results if vector is not None])

    def _record(self, request: EmbedRequest) -> None:
        now = time.monotonic()
        self._metrics.record_request(
            prompt_tokens=sum(len(ids) for ids in request.inputs),
            generated_per_choice=[0],
            finish_reasons=["stop"],
            arrival=request.arrival,
            first_token=None,
            now=now,
        )
        self._metrics.observe("queue_time", (request.started or now) - request.arrival)

    def _fail(self, requests: set[EmbedRequest]) -> None:
        with self._cond:
            for request in requests:
                request.dropped = True  # its other rows, still waiting, need not run
                self._running.discard(request)
                if request in self._waiting:
                    self._waiting.remove(request)
        for request in requests:
            request.deliver(RequestFailedError("the embedding request failed"))

    def _take_all(self) -> list[EmbedRequest]:
        """Every request not yet answered, marked so that a batch still running does not answer it too."""
        left = [*self._waiting, *self._running]
        for request in left:
            request.dropped = True
        self._waiting.clear()
        self._running.clear()
        return left

    def _die(self, error: str) -> None:
        with self._cond:
            self.health = EngineHealth("dead", error)
            left = self._take_all()
            callback, self._on_death = self._on_death, None
        for request in left:
            request.deliver(EngineDeadError(error))
        if callback is not None:
            callback()
