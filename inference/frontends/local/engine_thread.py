"""EngineThread: the daemon thread that owns one LLMEngine and runs its step loop.

Other threads reach the LLMEngine only through commands (submit, abort, take) that the thread applies at
the start of each iteration; it pushes each request's outputs into that request's RequestStream. It sleeps
on a condition while there is no work, and an idle engine first lets a burst gather (AdmissionGate).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inference.core.engine import LLMEngine
from inference.core.request import Request
from inference.errors import EngineDeadError, QueueFullError, RequestFailedError
from inference.frontends.local.admission import AdmissionGate
from inference.outputs import RequestOutput
from inference.sampling_params import SamplingParams
from inference.status import EngineHealth

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RequestStream:
    """Where one request's outputs go: a queue on its caller's event loop."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[RequestOutput | BaseException]
    owner: EngineThread  # the engine running the request now; changes when a successor adopts it
    closed: bool = False  # the consumer is gone: a successor must not adopt the request

    def push(self, item: RequestOutput | BaseException) -> None:
        # A closed caller loop raises RuntimeError: nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


@dataclass(slots=True)
class Submission:
    """A request on its way into an engine, with the stream its caller iterates."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int
    arrival_time: float
    stream: RequestStream

    @classmethod
    def of(cls, request: Request, stream: RequestStream) -> Submission:
        return cls(
            request.request_id,
            request.prompt,
            request.prompt_token_ids,
            request.params,
            request.root.priority,
            request.metrics.arrival_time,
            stream,
        )

    def fail(self, error: BaseException) -> None:
        """End the request's stream with error (it cannot run anywhere)."""
        self.stream.push(error)


@dataclass(slots=True)
class _Take:
    """Command: remove the requests that never started (EngineThread.take_unstarted)."""

    taken: list[Submission] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


_Command = Submission | _Take | str  # a str is a request id to abort


class EngineThread:
    def __init__(self, engine: LLMEngine, admission: AdmissionGate) -> None:
        self.engine = engine
        self.admission = admission
        self.health = EngineHealth("ready")  # replaced, never changed in place
        self.stats = engine.stats()  # the snapshot after the latest step
        self._cond = threading.Condition()
        self._commands: list[_Command] = []
        self._streams: dict[str, RequestStream] = {}
        self._given: dict[str, RequestStream] = {}  # streams take_unstarted gave away: abort() follows them
        self._accepting = True
        self._stop = False
        self._on_death: Callable[[], None] | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"mooncake-engine-{engine.config.model}", daemon=True
        )
        self._thread.start()

    # ---- from other threads -----------------------------------------------------------------------
    def check_open(self) -> None:
        if self.health.state == "dead" or not self._accepting:
            raise EngineDeadError(self.health.error or "the engine is shut down")

    def submit(self, submission: Submission, *, limit_queue: bool = True) -> None:
        """Queue a checked request; its stream now belongs to this engine (unless its consumer left)."""
        with self._cond:
            self.check_open()
            if submission.request_id in self._streams:
                raise ValueError(f"request id {submission.request_id!r} is already in use")
            pending = sum(isinstance(c, Submission) for c in self._commands)
            if limit_queue and self.stats.num_waiting + pending >= self.engine.config.max_queue_len:
                raise QueueFullError(
                    f"{self.stats.num_waiting + pending} requests are already waiting; retry shortly (the "
                    "server's max_queue_len bounds the queue)"
                )
            stream = submission.stream
            stream.owner = self  # before the closed check: see AsyncEngine.generate()'s finally
            if stream.closed:
                return
            self._streams[submission.request_id] = stream
            self._commands.append(submission)
            self.admission.arrived(time.monotonic())
            self._cond.notify()

    def abort(self, request_id: str) -> None:
        """Abort the request wherever it runs now (a successor, if this engine gave it away)."""
        with self._cond:
            stream = self._streams.get(request_id) or self._given.get(request_id)
        owner = stream.owner if stream is not None else self
        with owner._cond:
            owner._commands.append(request_id)
            owner._cond.notify()

    def set_on_death(self, callback: Callable[[], None]) -> None:
        """Call `callback()` once if the thread dies (at once if it already has)."""
        with self._cond:
            dead = self.health.state == "dead"
            self._on_death = None if dead else callback
        if dead:
            callback()

    def stop_accepting(self) -> None:
        with self._cond:
            self._accepting = False
            self._cond.notify()  # no burst is worth waiting for any more

    def take_unstarted(self) -> list[Submission]:
        """Remove the requests that never started (no token computed), oldest first, with their streams."""
        take = _Take()
        with self._cond:
            alive = self.health.state != "dead" and not self._stop
            if alive:
                self._commands.append(take)
                self._cond.notify()
        while alive and not take.done.wait(0.01) and self._thread.is_alive():
            pass
        with self._cond:
            taken = list(take.taken)
            self._given.update((s.request_id, s.stream) for s in taken)
        return sorted(taken, key=lambda s: s.arrival_time)

    def stop(self, *, drain_timeout: float = 0.0) -> None:
        """Stop accepting, let running requests finish for up to drain_timeout seconds, then stop."""
        self.stop_accepting()
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline and self._thread.is_alive() and self._busy():
            time.sleep(0.01)
        with self._cond:
            self._commands.extend(self._streams)  # abort whatever is left; consumers get a final output
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=30.0)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _busy(self) -> bool:
        with self._cond:
            return bool(self._streams or self._commands)

    # ---- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not (self._commands or self._stop or self.engine.has_unfinished_requests()):
                        self._cond.wait()
                    if not self.engine.has_unfinished_requests():
                        self._hold_admission()
                    commands, self._commands = self._commands, []
                    self.admission.opened()
                    stop = self._stop
                self._apply(commands)
                outputs = self.engine.step() if self.engine.has_unfinished_requests() else []
                self.stats = self.engine.stats()
                self._deliver(outputs)
                for request_id, error in self.engine.take_failures():
                    self._deliver_error(request_id, error)
                if stop and not self.engine.has_unfinished_requests():
                    return
        except Exception as exc:
            logger.exception("Engine thread for %s died", self.engine.config.model)
            cause = f" (after {type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
            self._die(f"{type(exc).__name__}: {exc}{cause}")

    def _hold_admission(self) -> None:
        """With the lock held and the engine idle: keep admission closed as long as the gate says."""
        while self._accepting and not self._stop:
            wait = self.admission.hold_s(time.monotonic())
            if wait <= 0:
                return
            self._cond.wait(wait)

    def _apply(self, commands: list[_Command]) -> None:
        for command in commands:
            if isinstance(command, str):
                self.engine.abort_request(command)
            elif isinstance(command, _Take):
                self._take(command)
            else:
                self._add(command)

    def _add(self, submission: Submission) -> None:
        try:
            self.engine.add_request(
                submission.request_id,
                submission.prompt if submission.prompt is not None else submission.prompt_token_ids,
                submission.params,
                prompt_token_ids=submission.prompt_token_ids,
                arrival_time=submission.arrival_time,
                priority=submission.priority,
            )
        except (ValueError, QueueFullError) as exc:  # checked up front; only a race gets here
            self._deliver_error(submission.request_id, exc)
        except Exception:  # a bad request must not take the engine thread down with it
            logger.exception("Adding request %s failed", submission.request_id)
            self._deliver_error(
                submission.request_id,
                RequestFailedError(f"The engine could not start request {submission.request_id}."),
            )

    def _take(self, take: _Take) -> None:
        requests = self.engine.take_unscheduled()
        with self._cond:
            for request in requests:
                stream = self._streams.pop(request.request_id, None)
                if stream is not None:
                    take.taken.append(Submission.of(request, stream))
        take.done.set()

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        with self._cond:
            targets = [(self._streams.get(out.request_id), out) for out in outputs]
            for out in outputs:
                if out.finished:
                    self._streams.pop(out.request_id, None)
        for stream, out in targets:
            if stream is not None:
                stream.push(out)

    def _deliver_error(self, request_id: str, exc: BaseException) -> None:
        with self._cond:
            stream = self._streams.pop(request_id, None)
        if stream is not None:
            stream.push(exc)

    def _die(self, error: str) -> None:
        with self._cond:
            self.health = EngineHealth("dead", error)
            self._accepting = False
            streams, self._streams = self._streams, {}
            # Every request just failed: the last loop's snapshot would show them running forever, and
            # the manager's idle checks (keep-alive, eviction) would never unload the dead engine.
            self.stats = dataclasses.replace(self.stats, num_running=0, num_waiting=0, kv_cache_usage=0.0)
            on_death, self._on_death = self._on_death, None
        # The callback first: a caller that learns of the death must find the supervisor already told.
        if on_death is not None:
            try:
                on_death()
            except Exception:
                logger.exception("The death callback of %s failed", self.engine.config.model)
        for stream in streams.values():
            # The cause is logged; callers learn only that this engine stopped.
            stream.push(EngineDeadError("The engine stopped unexpectedly while running this request."))
