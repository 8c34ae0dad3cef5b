"""AsyncEngine: one daemon thread runs LLMEngine.step(); asyncio callers submit and stream through it.

Callers never touch the LLMEngine directly: they queue commands (add, abort) that the engine thread
applies at the start of each iteration, and get outputs pushed with loop.call_soon_threadsafe into one
asyncio.Queue per request. The thread sleeps on a condition while there is no work.

A restart hands over: `hand_over` stops the engine but returns the requests that never started, streams
intact, and the successor's `adopt` feeds them on, so their `generate()` iterators keep streaming. A stream
records its current owner, so closing the iterator aborts the request wherever it now runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from inference.config import EngineConfig
from inference.engine import LLMEngine
from inference.errors import EngineDeadError, QueueFullError, RequestFailedError
from inference.metrics import EngineStats
from inference.models import DecoderForCausalLM
from inference.outputs import RequestOutput
from inference.request import Request
from inference.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class EngineHealth:
    state: Literal["loading", "ready", "dead"]
    error: str | None = None


@dataclass(slots=True)
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[RequestOutput | BaseException]
    owner: AsyncEngine  # the engine running the request now; changes when a successor adopts it
    closed: bool = False  # the consumer is gone: a successor must not adopt the request


@dataclass(slots=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    prompt: str | None
    params: SamplingParams
    priority: int
    arrival_time: float

    @classmethod
    def of(cls, request: Request) -> _Add:
        return cls(
            request.request_id,
            request.prompt_token_ids,
            request.prompt,
            request.params,
            request.root.priority,
            request.metrics.arrival_time,
        )


@dataclass(slots=True)
class QueuedRequest:
    """A request that never started, handed over by a stopping engine for its successor to adopt."""

    command: _Add
    stream: _Stream

    @property
    def request_id(self) -> str:
        return self.command.request_id

    def fail(self, error: BaseException) -> None:
        """End the request's stream with error (no successor can run it)."""
        _push(self.stream, error)


class _Expected:
    """A caller's notice that it is preparing a request (see AsyncEngine.expect)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def __enter__(self) -> _Expected:
        with self._engine._cond:
            self._engine._expected.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._engine._cond:
            if self in self._engine._expected:  # never submitted (an error before the engine)
                self._engine._expected.discard(self)
                self._engine._cond.notify()


class AsyncEngine:
    # An idle engine woken by a new request first lets a burst gather, so the burst shares one first step
    # instead of queueing behind a step (~100 ms on CPU) that prefills only the request that came first.
    # It waits while callers announced by expect() are still preparing, or while adds keep coming at most
    # burst_gap_s apart, and never longer than burst_max_s. A lone request pays at most one gap.
    burst_gap_s = 0.002
    burst_max_s = 0.05

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.model_name = engine.config.model
        self.max_model_len = engine.max_model_len
        self.tokenizer: Any = engine.tokenizer
        self.eos_token_ids = engine.eos_token_ids
        self._cond = threading.Condition()
        self._commands: list[_Add | str] = []  # a str is a request id to abort
        self._expected: set[_Expected] = set()  # callers preparing a request (expect())
        self._streams: dict[str, _Stream] = {}
        self._accepting = True
        self._stop = False
        self._handing_over = False
        self._handed: list[QueuedRequest] = []  # taken out of the LLMEngine by the engine thread
        self._handed_event = threading.Event()
        self._moved: dict[str, _Stream] = {}  # handed-over streams, so abort() reaches their new owner
        self._health = EngineHealth("ready")
        self._on_death: Callable[[AsyncEngine], None] | None = None
        self._stats = engine.stats()
        self._thread = threading.Thread(
            target=self._run, name=f"mooncake-engine-{self.model_name}", daemon=True
        )
        self._thread.start()

    @classmethod
    def start(cls, config: EngineConfig) -> AsyncEngine:
        """Load the model synchronously, then start the step thread."""
        return cls(LLMEngine(config))

    # ---- what the model manager and console show ------------------------------------------------
    @property
    def memory_bytes(self) -> int:
        """Weights plus KV cache, the figure the manager's memory budget counts."""
        model = self.engine.loaded.model
        weights = (
            model.weight_bytes()
            if isinstance(model, DecoderForCausalLM)
            else sum(p.numel() * p.element_size() for p in model.parameters())
        )
        return int(weights + getattr(self.engine.runner, "kv_cache_bytes", 0))

    @property
    def kv_capacity_tokens(self) -> int:
        return self.engine.runner.kv_capacity_tokens

    @property
    def model_details(self) -> dict[str, Any]:
        loaded = self.engine.loaded
        return {
            "architecture": loaded.architecture,
            "num_params": loaded.num_params,
            "dtype": str(loaded.dtype).removeprefix("torch."),
            "size_on_disk": loaded.size_on_disk,
        }

    # ---- caller side (any thread / event loop) ----------------------------------------------------
    def expect(self) -> _Expected:
        """Context manager a caller holds while it prepares a request (auth, templates, tokenizing).

        An idle engine waits (briefly, see burst_max_s) for announced requests before its first step,
        so a burst of requests is prefilled together. Submitting any request takes one notice.
        """
        return _Expected(self)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True
        )
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> AsyncIterator[RequestOutput]:
        """Stream outputs; closing the iterator early aborts the request and frees its blocks."""
        request_id = request_id or uuid.uuid4().hex
        if self._health.state == "dead" or not self._accepting:
            raise EngineDeadError(self._health.error or "the engine is shut down")
        token_ids = self.engine.encode(prompt)
        self.engine.check_prompt(token_ids, params)
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue(), self)
        with self._cond:
            if not self._accepting or self._health.state == "dead":
                raise EngineDeadError(self._health.error or "the engine is shut down")
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already in use")
            pending = sum(isinstance(c, _Add) for c in self._commands)
            if self._stats.num_waiting + pending >= self.engine.config.max_queue_len:
                raise QueueFullError(f"{self._stats.num_waiting + pending} requests are already waiting")
            self._streams[request_id] = stream
            prompt_text = prompt if isinstance(prompt, str) else None
            self._commands.append(_Add(request_id, token_ids, prompt_text, params, priority, time.time()))
            if self._expected:
                self._expected.pop()
            self._cond.notify()
        finished = False
        try:
            while True:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            if not finished:
                stream.closed = True  # set before reading the owner: adopt() sets the owner, then checks
                stream.owner._submit_abort(request_id)

    async def abort(self, request_id: str) -> None:
        with self._cond:
            moved = self._moved.get(request_id)
        (moved.owner if moved is not None else self)._submit_abort(request_id)

    def health(self) -> EngineHealth:
        return EngineHealth(self._health.state, self._health.error)

    def set_on_death(self, callback: Callable[[AsyncEngine], None]) -> None:
        """Call `callback(self)` once if the engine thread dies (at once if it already has)."""
        with self._cond:
            dead = self._health.state == "dead"
            self._on_death = None if dead else callback
        if dead:
            callback(self)

    def stats(self) -> EngineStats:
        return self._stats

    def shutdown(self, *, drain_timeout: float = 0.0) -> None:
        """Stop accepting, let running requests finish for up to drain_timeout seconds, then stop."""
        with self._cond:
            self._accepting = False
        self._drain_and_stop(time.monotonic() + drain_timeout)

    def hand_over(self, *, drain_timeout: float = 0.0) -> list[QueuedRequest]:
        """Like shutdown, but requests that never started are returned for a successor instead of aborted."""
        deadline = time.monotonic() + drain_timeout
        with self._cond:
            self._accepting = False
            alive = self._health.state != "dead"
            handed: list[QueuedRequest] = []
            if alive:
                # Adds still in the command queue never reached the LLMEngine: take them as they are.
                adds = [c for c in self._commands if isinstance(c, _Add)]
                self._commands = [c for c in self._commands if not isinstance(c, _Add)]
                handed = [QueuedRequest(a, s) for a in adds if (s := self._streams.pop(a.request_id, None))]
                self._handing_over = True
                self._cond.notify()
        while alive and not self._handed_event.wait(0.01):
            if not self._thread.is_alive():
                break
        with self._cond:
            handed += self._handed
            self._handed = []
            self._moved = {q.request_id: q.stream for q in handed}
        self._drain_and_stop(deadline)
        return sorted(handed, key=lambda q: q.command.arrival_time)

    def adopt(self, requests: list[QueuedRequest]) -> None:
        """Run requests handed over by a predecessor; their original generate() iterators get the outputs."""
        for queued in requests:
            command, stream = queued.command, queued.stream
            if command.prompt is not None:  # this model's tokenizer decides, should the source have changed
                command.prompt_token_ids = self.engine.encode(command.prompt)
            try:
                self.engine.check_prompt(command.prompt_token_ids, command.params)
            except ValueError as exc:  # PromptTooLongError when the new context is smaller
                _push(stream, exc)
                continue
            with self._cond:
                if not self._accepting or self._health.state == "dead":
                    _push(stream, EngineDeadError(self._health.error or "the engine is shut down"))
                    continue
                if command.request_id in self._streams:
                    _push(stream, ValueError(f"request id {command.request_id!r} is already in use"))
                    continue
                stream.owner = self  # before the closed check: see generate()'s finally
                if stream.closed:
                    continue
                self._streams[command.request_id] = stream
                self._commands.append(command)
                self._cond.notify()

    def _drain_and_stop(self, deadline: float) -> None:
        while time.monotonic() < deadline and self._thread.is_alive() and self._busy():
            time.sleep(0.01)
        with self._cond:
            self._commands.extend(self._streams)  # abort whatever is left; consumers get a final output
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=30.0)

    # ---- engine thread ----------------------------------------------------------------------------
    def _busy(self) -> bool:
        with self._cond:
            return bool(self._streams or self._commands)

    def _submit_abort(self, request_id: str) -> None:
        with self._cond:
            self._commands.append(request_id)
            self._cond.notify()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not (
                        self._commands
                        or self._stop
                        or self.engine.has_unfinished_requests()
                        or (self._handing_over and not self._handed_event.is_set())
                    ):
                        self._cond.wait()
                    if not self.engine.has_unfinished_requests():
                        self._gather_burst()
                    commands, self._commands = self._commands, []
                    stop = self._stop
                    take = self._handing_over and not self._handed_event.is_set()
                self._apply(commands)
                if take:
                    self._take_unscheduled()
                outputs = self.engine.step() if self.engine.has_unfinished_requests() else []
                self._stats = self.engine.stats()
                self._deliver(outputs)
                for request_id, error in self.engine.take_failures():
                    self._deliver_error(request_id, error)
                if stop and not self.engine.has_unfinished_requests():
                    return
        except Exception as exc:
            logger.exception("Engine thread for %s died", self.model_name)
            cause = f" (after {type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
            self._die(f"{type(exc).__name__}: {exc}{cause}")

    def _gather_burst(self) -> None:
        """With the lock held and the engine idle: let a burst of adds gather before the first step."""
        if not any(isinstance(c, _Add) for c in self._commands):
            return
        deadline = time.monotonic() + self.burst_max_s
        seen = -1
        while not (self._stop or self._handing_over):
            if not self._expected and len(self._commands) == seen:
                return  # nobody announced and no add for a whole gap: the burst is over
            seen = len(self._commands)
            now = time.monotonic()
            if now >= deadline:
                return
            self._cond.wait(min(deadline - now, self.burst_gap_s))

    def _apply(self, commands: list[_Add | str]) -> None:
        for command in commands:
            if isinstance(command, str):
                self.engine.abort_request(command)
                continue
            try:
                self.engine.add_request(
                    command.request_id,
                    command.prompt if command.prompt is not None else command.prompt_token_ids,
                    command.params,
                    prompt_token_ids=command.prompt_token_ids,
                    arrival_time=command.arrival_time,
                    priority=command.priority,
                )
            except (ValueError, QueueFullError) as exc:  # checked up front; only a race gets here
                self._deliver_error(command.request_id, exc)
            except Exception:  # a bad request must not take the engine thread down with it
                logger.exception("Adding request %s failed", command.request_id)
                self._deliver_error(
                    command.request_id,
                    RequestFailedError(f"The engine could not start request {command.request_id}."),
                )

    def _take_unscheduled(self) -> None:
        requests = self.engine.take_unscheduled()
        with self._cond:
            for request in requests:
                stream = self._streams.pop(request.request_id, None)
                if stream is not None:
                    self._handed.append(QueuedRequest(_Add.of(request), stream))
        self._handed_event.set()

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        with self._cond:
            targets = [(self._streams.get(out.request_id), out) for out in outputs]
            for out in outputs:
                if out.finished:
                    self._streams.pop(out.request_id, None)
        for stream, out in targets:
            if stream is not None:
                _push(stream, out)

    def _deliver_error(self, request_id: str, exc: BaseException) -> None:
        with self._cond:
            stream = self._streams.pop(request_id, None)
        if stream is not None:
            _push(stream, exc)

    def _die(self, error: str) -> None:
        with self._cond:
            self._health = EngineHealth("dead", error)
            self._accepting = False
            streams, self._streams = self._streams, {}
            # Every request just failed: the last loop's snapshot would show them running forever, and
            # the manager's idle checks (keep-alive, eviction) would never unload the dead engine.
            self._stats = dataclasses.replace(self._stats, num_running=0, num_waiting=0, kv_cache_usage=0.0)
            on_death, self._on_death = self._on_death, None
        for stream in streams.values():
            # The cause is logged; callers learn only that this engine stopped.
            _push(stream, EngineDeadError("The engine stopped unexpectedly while running this request."))
        if on_death is not None:
            try:
                on_death(self)
            except Exception:
                logger.exception("The death callback of %s failed", self.model_name)


def _push(stream: _Stream, item: RequestOutput | BaseException) -> None:
    # A closed caller loop raises RuntimeError: nobody is listening any more.
    with contextlib.suppress(RuntimeError):
        stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)
