"""Running a Responses request on the chat pipeline: its renderer (JSON or typed events, stored when asked),
background responses and their cancellation.

Background tasks live in the process that admitted them. A cancel may reach any replica: it marks the row
cancelled, this process's task is cancelled at once, and the generating replica's watcher, which reads the
row every CANCEL_POLL_S, stops its generation there (stored_finish writes only active rows, so the cancel
stands either way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from inference.api import EngineClient
from webapp.api.auth import Caller
from webapp.api.schemas.chat import ChatCompletionRequest
from webapp.api.schemas.responses import ResponsesRequest
from webapp.api.services.chat import ChatRenderer, prepare_chat
from webapp.api.services.defaults import RequestDefaults
from webapp.api.services.models import naming_usable_models
from webapp.api.services.pipeline import ApiRun, Job, start_generation
from webapp.api.services.responses_events import ResponseEvents, typed_event
from webapp.api.services.responses_render import (
    ResponseSpec,
    completed_object,
    error_object,
    response_object,
)
from webapp.api.services.responses_request import chat_request, input_items, refuse_unsupported
from webapp.api.services.responses_store import (
    check_storable,
    history,
    stored_cancel,
    stored_finish,
    stored_is_active,
    stored_save,
)
from webapp.api.services.streaming import sse_frames
from webapp.core.errors import MooncakeError, ServerFailure

logger = logging.getLogger(__name__)

ENDPOINT = "responses"
CANCEL_POLL_S = 1.0  # how soon a cancel (or delete) made on another replica stops a background generation


@dataclass(slots=True)
class PreparedResponse:
    """A validated Responses request: the chat request it runs as, and what its Response object echoes."""

    body: ResponsesRequest
    spec: ResponseSpec
    chat: ChatCompletionRequest
    user_id: int | None
    items: list[dict[str, Any]] = field(default_factory=list)

    def prepare(self, engine: EngineClient, defaults: RequestDefaults) -> Job:
        return prepare_chat(engine, self.chat, defaults=defaults)


async def prepare_response(caller: Caller, body: ResponsesRequest) -> PreparedResponse:
    """Refusals, input items and the stored conversation (previous_response_id) as one chat request."""
    refuse_unsupported(body)
    items = input_items(body)
    if body.store:
        check_storable(items)
    earlier: list[dict[str, Any]] = []
    if body.previous_response_id:
        earlier = await sync_to_async(history)(body.previous_response_id, caller.user_id)
    chat = chat_request(body, earlier, items, stream=body.stream)
    return PreparedResponse(
        body=body, spec=ResponseSpec.of(body), chat=chat, user_id=caller.user_id, items=items
    )


async def _store(prepared: PreparedResponse, body: dict[str, Any]) -> None:
    if prepared.body.store:
        await sync_to_async(stored_save)(
            prepared.spec, user_id=prepared.user_id, items=prepared.items, body=body
        )


class ResponsesRenderer:
    """The pipeline's Renderer for /v1/responses: chat's results, presented as Responses."""

    def __init__(self, prepared: PreparedResponse) -> None:
        self.prepared = prepared
        self.stream = ResponseEvents(prepared.spec)

    async def complete(self, job: Job, generations: list[Any]) -> dict[str, Any]:
        completion = await ChatRenderer().complete(job, generations)
        body = completed_object(self.prepared.spec, completion)
        await _store(self.prepared, body)
        return body

    async def events(self, job: Job, generations: list[Any]) -> AsyncIterator[dict[str, Any]]:
        stream = self.stream
        self.prepared.spec.model = job.model
        try:
            for event in stream.start():
                yield event
            try:
                async for chunk in ChatRenderer().events(job, generations):
                    for event in stream.chunk(chunk):
                        yield event
            except MooncakeError as exc:
                yield stream.failed(exc)
                return
            for event in stream.finish(job.model):
                yield event
        finally:
            # A client gone mid-stream stopped the generation (stored as cancelled, with what it had).
            final = stream.final or response_object(
                self.prepared.spec, status="cancelled", output=stream.output
            )
            await asyncio.shield(_store(self.prepared, final))

    def frames(self, events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        """Typed SSE frames, no [DONE]; an error the stream machinery meets ends it with response.failed."""
        return sse_frames(events, frame=typed_event, error_event=self.stream.failed, done=None)


_tasks: dict[str, asyncio.Task[None]] = {}


async def start_background(caller: Caller, prepared: PreparedResponse) -> dict[str, Any]:
    """Admit and start the generation now (errors are this request's), store it in_progress, finish later."""
    spec = prepared.spec
    async with naming_usable_models(prepared.body.model, caller.viewer):
        run = await start_generation(
            caller,
            endpoint=ENDPOINT,
            model=prepared.body.model,
            stream=False,
            sequences=1,
            prepare=prepared.prepare,
        )
    spec.model = run.job.model
    body = response_object(spec, status="in_progress")
    try:
        await _store(prepared, body)
    except BaseException:
        await asyncio.shield(_close(run, 500, "could not store the response"))
        raise
    loop = asyncio.get_running_loop()
    task = loop.create_task(_finish(run, prepared))
    watcher = loop.create_task(_watch(spec.id, task))
    _tasks[spec.id] = task

    def forget(_: asyncio.Task[None]) -> None:
        _tasks.pop(spec.id, None)
        watcher.cancel()

    task.add_done_callback(forget)
    return body


async def _watch(response_id: str, task: asyncio.Task[None]) -> None:
    """Cancel `task` once its row is no longer active: cancelled or deleted, on whichever replica."""
    while not task.done():
        await asyncio.sleep(CANCEL_POLL_S)
        if not await sync_to_async(stored_is_active)(response_id):
            task.cancel()
            return


async def _close(run: ApiRun, status: int, error: str) -> None:
    await run.abort()
    await run.close(status=status, error=error)


async def _finish(run: ApiRun, prepared: PreparedResponse) -> None:
    spec, status, error = prepared.spec, 200, ""
    try:
        body = completed_object(spec, await ChatRenderer().complete(run.job, run.generations))
    except asyncio.CancelledError:
        await asyncio.shield(_close(run, 499, "cancelled"))
        raise
    except Exception as exc:
        if not isinstance(exc, MooncakeError):
            logger.exception("background response %s failed", spec.id)
            exc = ServerFailure("Internal error while generating.")
        status, error = exc.status, exc.message
        body = response_object(spec, status="failed", error=error_object(exc.code, exc.message))
    await run.close(status=status if status != 200 else None, error=error)
    await sync_to_async(stored_finish)(spec, body, prepared.items)


async def cancel_response(caller: Caller, response_id: str) -> dict[str, Any]:
    body = await sync_to_async(stored_cancel)(response_id, caller.user_id)
    task = _tasks.get(response_id)
    if body["status"] == "cancelled" and task is not None:
        task.cancel()
    return body


async def wait_background(response_id: str) -> None:
    """Wait for this process's background task of `response_id`, if any (the tests' way to see it end)."""
    task = _tasks.get(response_id)
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
