"""The one generation service: chat and the API are two presentations of it.

admit (limits, before any work) -> engine -> prepare (template, tokenize, the prompt check; off the loop)
-> submit (the engine's admission errors surface here) -> stream -> close (tokens counted, the limiter's
slot released and the channel's usage recorded, exactly once however the request ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from inference.api import EngineClient, RequestOutput, SamplingParams
from webapp.core.errors import from_engine_error
from webapp.serving.limits import Admission, Bucket, Limiter, Limits
from webapp.serving.streams import Generation, merged, new_request_id, start_all

if TYPE_CHECKING:
    from webapp.serving.model_access import Viewer

logger = logging.getLogger(__name__)

Job = TypeVar("Job", bound="Prepared")
T = TypeVar("T")


@dataclass(slots=True)
class Prepared:
    """What a channel's prepare step hands the service: engine-ready prompts and sampling parameters."""

    prompts: list[list[int]]
    params: SamplingParams


@dataclass(slots=True)
class GenerationRequest(Generic[Job]):
    """One request as the service sees it, whatever the channel."""

    endpoint: str  # request ids and logs: "chat", "chat.completions", "completions"
    model: str | None  # None: the default model
    limit_checks: Sequence[tuple[Bucket, Limits]]
    # Template, tokenize, check: CPU work, which prepare must run off the event loop (asyncio.to_thread).
    prepare: Callable[[EngineClient], Awaitable[Job]]
    sequences: int = 1  # prompts x n: what the concurrency limit counts
    # False for work the server asks for on the caller's behalf (a chat title): its tokens count, but it is
    # not one of the caller's requests per minute.
    counted: bool = True
    deadline: float | None = None  # loop time at which generation is cut off (None: never)
    # Whose access to models applies (webapp.serving.model_access); None only for the server's own work.
    viewer: Viewer | None = None


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    duration_s: float = 0.0
    finish_reasons: list[str] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class GenerationRun(Generic[Job]):
    """An admitted request: its engine, its prepared job, its engine requests and its accounting."""

    def __init__(self, limiter: Limiter, admission: Admission, endpoint: str) -> None:
        self._limiter = limiter
        self._admission = admission
        self.endpoint = endpoint
        self.started = time.monotonic()
        self.engine: EngineClient | None = None
        self.job: Job | None = None
        self.generations: list[Generation] = []
        self.usage = Usage()
        self._closed = False
        self._on_close: list[Callable[[GenerationRun[Job]], Awaitable[None]]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def on_close(self, callback: Callable[[GenerationRun[Job]], Awaitable[None]]) -> None:
        """Record usage the channel's way (the API's request log) when the run closes."""
        self._on_close.append(callback)

    async def submit(self, deadline: float | None = None) -> None:
        """Hand every prompt to the engine and wait for each first output: queue-full, prompt and engine
        errors are raised here, before a channel has shown anything."""
        assert self.engine is not None and self.job is not None
        self.generations = [
            Generation(
                self.engine,
                prompt,
                self.job.params,
                request_id=new_request_id(self.endpoint),
                deadline=deadline,
            )
            for prompt in self.job.prompts
        ]
        await start_all(self.generations)

    def outputs(self) -> AsyncGenerator[tuple[int, RequestOutput], None]:
        """Every engine request's outputs as they come, tagged with its prompt's index."""
        return merged(self.generations)

    async def abort(self) -> None:
        await asyncio.gather(*(g.close() for g in self.generations), return_exceptions=True)

    async def close(self) -> None:
        """Account for the run once: tokens into the limiter, the slot released, the channel's records."""
        if self._closed:
            return
        self._closed = True
        self.usage = usage_of(self.generations, self.started)
        try:
            await _call(self._limiter, self._limiter.add_tokens, self._admission, self.usage.total_tokens)
        except Exception:  # a store gone away must not fail a served answer (its slot's lease ends it)
            logger.exception("Counting %s tokens failed", self.endpoint)
        try:
            await _call(self._limiter, self._limiter.release, self._admission)
        except Exception:
            logger.exception("Releasing a %s slot failed", self.endpoint)
        for callback in self._on_close:
            try:
                await callback(self)
            except Exception:  # Accounting never turns a served answer into an error.
                logger.exception("Recording usage for %s failed", self.endpoint)


def usage_of(generations: list[Generation], started: float) -> Usage:
    usage = Usage(prompt_tokens=sum(g.prompt_len for g in generations))
    usage.completion_tokens = sum(len(o.token_ids) for g in generations if g.last for o in g.last.outputs)
    firsts = [g.first_token_at for g in generations if g.first_token_at is not None]
    usage.ttft_s = min(firsts) - started if firsts else None
    usage.duration_s = time.monotonic() - started
    for g in generations:
        for o in g.last.outputs if g.last else []:
            usage.finish_reasons.append(o.finish_reason or ("length" if g.timed_out else "abort"))
    return usage


class GenerationService:
    def __init__(
        self,
        *,
        limiter: Limiter,
        engine_for: Callable[[str | None], Awaitable[EngineClient]],
        check_access: Callable[[Viewer, str | None], None] | None = None,
    ) -> None:
        self.limiter = limiter
        self._engine_for = engine_for
        self._check_access = check_access

    @contextlib.asynccontextmanager
    async def admitted(
        self, checks: Sequence[tuple[Bucket, Limits]], *, sequences: int = 1
    ) -> AsyncIterator[Admission]:
        """Hold an admission for work that is not a generation (tokenizer calls count as requests)."""
        admission = await _call(self.limiter, self.limiter.admit, checks, weight=sequences)
        try:
            yield admission
        finally:
            await _call(self.limiter, self.limiter.release, admission)

    async def engine(self, model: str | None, viewer: Viewer | None = None) -> EngineClient:
        """The loaded engine for `model` (None: the default), errors in the hierarchy; a model `viewer`
        may not use is as unknown as a model that does not exist."""
        if viewer is not None and self._check_access is not None:
            await asyncio.to_thread(self._check_access, viewer, model)
        try:
            return await self._engine_for(model)
        except Exception as exc:
            raise from_engine_error(exc) from exc

    async def prepare(self, request: GenerationRequest[Job]) -> GenerationRun[Job]:
        """Admit, find the engine and prepare the job; the caller submits, streams and closes the run.

        Limits come first: a refused request costs no template, tokenizer or grammar work.
        """
        run = await self._admit(request)
        try:
            run.engine = await self.engine(request.model, request.viewer)
            run.job = await request.prepare(run.engine)
        except BaseException:
            await asyncio.shield(run.close())
            raise
        return run

    async def start(self, request: GenerationRequest[Job]) -> GenerationRun[Job]:
        """prepare() and submit() in one, the run closed if either fails."""
        run = await self._admit(request)
        try:
            run.engine = engine = await self.engine(request.model, request.viewer)
            # Announced until submitted: an idle engine lets a burst of requests gather into one first
            # step rather than prefilling whichever got through preparation first on its own.
            with engine.expect():
                run.job = await request.prepare(engine)
                await run.submit(request.deadline)
        except BaseException:
            await asyncio.shield(run.close())
            raise
        return run

    async def _admit(self, request: GenerationRequest[Job]) -> GenerationRun[Job]:
        admission = await _call(
            self.limiter,
            self.limiter.admit,
            request.limit_checks,
            weight=request.sequences,
            counted=request.counted,
        )
        return GenerationRun(self.limiter, admission, request.endpoint)


async def _call(limiter: Limiter, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A limiter call: direct for the in-process one, on a thread when it is a network round trip."""
    if limiter.local:
        return method(*args, **kwargs)
    return await asyncio.to_thread(method, *args, **kwargs)
