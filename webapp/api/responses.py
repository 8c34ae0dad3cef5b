"""HTTP responses for generations: a JSON body, or an SSE stream whose end closes the run exactly once."""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from inference.api import EngineClient
from webapp.api.auth import Caller, authenticate
from webapp.api.services.defaults import RequestDefaults
from webapp.api.services.models import naming_usable_models
from webapp.api.services.pipeline import ApiRun, Job, Renderer, start_generation
from webapp.api.services.streaming import sse_frames
from webapp.core.errors import MooncakeError

# Events to SSE bytes: chat's `data:` frames and [DONE], or the Responses API's named events.
Framing = Callable[[AsyncIterator[dict[str, Any]]], AsyncIterator[bytes]]


async def generation_response(
    request: HttpRequest,
    *,
    endpoint: str,
    model: str | None,
    stream: bool,
    sequences: int,
    prepare: Callable[[EngineClient, RequestDefaults], Job],
    renderer: Renderer,
    caller: Caller | None = None,
    framing: Framing = sse_frames,
) -> HttpResponseBase:
    # `caller`: a view that authenticated already (it read stored data first); `framing`: how events go
    # on the wire (the Responses API names each event).
    caller = caller or await authenticate(request)
    async with naming_usable_models(model, caller.viewer):
        run = await start_generation(
            caller, endpoint=endpoint, model=model, stream=stream, sequences=sequences, prepare=prepare
        )
    if stream:
        return _stream_response(run, renderer.events(run.job, run.generations), framing)
    try:
        body = await renderer.complete(run.job, run.generations)
    except MooncakeError as exc:
        await run.close(status=exc.status, error=exc.message)
        raise
    except BaseException as exc:
        status = 499 if isinstance(exc, asyncio.CancelledError) else 500
        await asyncio.shield(run.close(status=status, error=type(exc).__name__))
        raise
    await run.close()
    return HttpResponse(json.dumps(body, ensure_ascii=False), content_type="application/json")


_background: set[asyncio.Task[None]] = set()


async def _abandon(run: ApiRun) -> None:
    if run.closed:
        return
    await run.abort()
    await run.close(status=499, error="client disconnected before the stream started")


def _abandon_later(loop: asyncio.AbstractEventLoop, run: ApiRun) -> None:
    def start() -> None:
        task = loop.create_task(_abandon(run))
        _background.add(task)
        task.add_done_callback(_background.discard)

    if not run.closed and not loop.is_closed():
        loop.call_soon_threadsafe(start)


def _stream_response(
    run: ApiRun, events: AsyncIterator[dict[str, Any]], framing: Framing = sse_frames
) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[bytes]:
        status, error = 200, ""
        try:
            async for frame in framing(events):
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
