"""The life of one generation request, shared by chat and completions.

auth -> model -> prepare (every 400) -> limits (429) -> engine admission (503) -> answer or stream,
with usage recorded and the concurrency slot released exactly once, however the request ends.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from inference.api import EngineClient, SamplingParams
from webapp.api.auth import Caller, authenticate
from webapp.api.errors import APIError
from webapp.api.services.defaults import RequestDefaults, request_defaults_shared
from webapp.api.services.engine_access import engine_for, model_name
from webapp.api.services.generation import Generation, new_request_id, request_timeout_s, start_all
from webapp.api.services.limits import Admission, limiter
from webapp.api.services.streaming import sse_frames
from webapp.api.services.usage import RequestRecord, request_record_save


@dataclass(slots=True)
class Job:
    """A validated request, ready for the engine."""

    model: str
    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool
    prompt_text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Renderer(Protocol):
    async def complete(self, job: Job, generations: list[Generation]) -> dict[str, Any]: ...
    def events(self, job: Job, generations: list[Generation]) -> AsyncIterator[dict[str, Any]]: ...


def usage_of(generations: list[Generation]) -> dict[str, int]:
    prompt = sum(g.prompt_len for g in generations)
    completion = sum(len(o.token_ids) for g in generations if g.last for o in g.last.outputs)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _finish(record: RequestRecord, generations: list[Generation], started: float) -> None:
    usage = usage_of(generations)
    record.prompt_tokens = usage["prompt_tokens"]
    record.completion_tokens = usage["completion_tokens"]
    firsts = [g.first_token_at for g in generations if g.first_token_at is not None]
    record.ttft_s = min(firsts) - started if firsts else None
    record.duration_s = time.monotonic() - started
    for g in generations:
        for o in g.last.outputs if g.last else []:
            record.finish_reasons.append(o.finish_reason or ("length" if g.timed_out else "abort"))


class RequestRun:
    """Owns the bookkeeping of one request; close() is idempotent."""

    def __init__(self, caller: Caller, record: RequestRecord) -> None:
        self.caller = caller
        self.record = record
        self.started = time.monotonic()
        self.admission: Admission | None = None
        self.generations: list[Generation] = []
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, *, status: int | None = None, error: str = "") -> None:
        if self._closed:
            return
        self._closed = True
        if status is not None:
            self.record.status_code = status
        self.record.error = error
        _finish(self.record, self.generations, self.started)
        if self.admission is not None:
            limiter.add_tokens(self.admission, self.record.prompt_tokens + self.record.completion_tokens)
            limiter.release(self.admission)
        await request_record_save(caller=self.caller, record=self.record)


async def run_generation(
    request: HttpRequest,
    *,
    endpoint: str,
    model: str | None,
    stream: bool,
    prepare: Callable[[EngineClient, RequestDefaults], Job],
    renderer: Renderer,
) -> HttpResponseBase:
    caller = await authenticate(request)
    run = RequestRun(caller, RequestRecord(endpoint=endpoint, stream=stream, model=model or ""))
    try:
        engine = await engine_for(model)
        # Announced from here until submitted: an idle engine lets a burst of requests gather into one
        # first step rather than prefilling whichever got through this preparation first on its own.
        with engine.expect():
            # The console's defaults are a DB read: on Django's thread-sensitive path, like auth and usage.
            defaults = await request_defaults_shared(model=model_name(engine, model))
            # Templates, tokenization and grammar compilation are CPU work: keep them off the event loop.
            job = await asyncio.to_thread(prepare, engine, defaults)
            run.record.model = job.model
            run.record.prompt_text = job.prompt_text
            run.admission = limiter.admit(caller.limit_checks)
            deadline = asyncio.get_running_loop().time() + request_timeout_s()
            run.generations = [
                Generation(engine, prompt, job.params, request_id=new_request_id(endpoint), deadline=deadline)
                for prompt in job.prompts
            ]
            await start_all(run.generations)
        if not stream:
            body = await renderer.complete(job, run.generations)
            await run.close()
            return HttpResponse(json.dumps(body, ensure_ascii=False), content_type="application/json")
    except APIError as exc:
        await run.close(status=exc.status, error=exc.message)
        raise
    except BaseException as exc:
        await asyncio.shield(
            run.close(
                status=499 if isinstance(exc, asyncio.CancelledError) else 500, error=type(exc).__name__
            )
        )
        raise
    return _stream_response(run, renderer.events(job, run.generations))


_background: set[asyncio.Task[None]] = set()


async def _abandon(run: RequestRun) -> None:
    if run.closed:
        return
    await asyncio.gather(*(g.close() for g in run.generations), return_exceptions=True)
    await run.close(status=499, error="client disconnected before the stream started")


def _abandon_later(loop: asyncio.AbstractEventLoop, run: RequestRun) -> None:
    def start() -> None:
        task = loop.create_task(_abandon(run))
        _background.add(task)
        task.add_done_callback(_background.discard)

    if not run.closed and not loop.is_closed():
        loop.call_soon_threadsafe(start)


def _stream_response(run: RequestRun, events: AsyncIterator[dict[str, Any]]) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[bytes]:
        status, error = 200, ""
        try:
            async for frame in sse_frames(events):
                yield frame
        except BaseException as exc:
            # A client disconnect cancels this generator: the engine requests are closed (aborted) by
            # the generations' own finally blocks; here the request is only accounted as dropped.
            status, error = 499, type(exc).__name__
            raise
        finally:
            await asyncio.shield(run.close(status=status, error=error))

    response = StreamingHttpResponse(body(), content_type="text/event-stream")
    # A client gone before the first byte leaves body() never started, so its finally never runs:
    # when the response is collected, abort the engine requests and free the limiter slot instead.
    weakref.finalize(response, _abandon_later, asyncio.get_running_loop(), run)
    response["Cache-Control"] = "no-cache"
    # Tell reverse proxies (nginx in docker/) not to buffer the stream.
    response["X-Accel-Buffering"] = "no"
    return response
