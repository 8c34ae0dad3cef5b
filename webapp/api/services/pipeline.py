"""The API's side of the generation service: its job, its renderers' contract and its request log.

The service (webapp.serving.generation) admits, prepares, submits and accounts; this module adds what only
the API has: the console's per-model request defaults, a deadline, and a RequestLog row per request.
The HTTP side (JSON or SSE responses) is webapp.api.responses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from inference.api import EmbeddingClient, EngineClient
from webapp.accounts.request_log import RequestRecord, request_record_save
from webapp.api.auth import Caller
from webapp.api.services.defaults import RequestDefaults, request_defaults_shared
from webapp.api.services.embeddings import only_for_embeddings
from webapp.api.services.models import model_name
from webapp.serving.generation import GenerationRequest, GenerationRun, Prepared, usage_of
from webapp.serving.runtime import get_runtime
from webapp.serving.streams import Generation, request_timeout_s


@dataclass(slots=True)
class Job(Prepared):
    """A validated request, ready for the engine, with what its renderer needs."""

    model: str = ""
    stream: bool = False
    include_usage: bool = False
    prompt_text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Renderer(Protocol):
    async def complete(self, job: Job, generations: list[Generation]) -> dict[str, Any]: ...
    def events(self, job: Job, generations: list[Generation]) -> AsyncIterator[dict[str, Any]]: ...


def usage_dict(generations: list[Generation]) -> dict[str, int]:
    """OpenAI's usage object."""
    usage = usage_of(generations, 0.0)
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


class ApiRun:
    """One API request's run and its request-log row; close() is idempotent."""

    def __init__(self, run: GenerationRun[Job], caller: Caller, record: RequestRecord) -> None:
        self.run = run
        self.caller = caller
        self.record = record

    @property
    def job(self) -> Job:
        assert self.run.job is not None
        return self.run.job

    @property
    def generations(self) -> list[Generation]:
        return self.run.generations

    @property
    def closed(self) -> bool:
        return self.run.closed

    async def abort(self) -> None:
        await self.run.abort()

    async def close(self, *, status: int | None = None, error: str = "") -> None:
        if self.run.closed:
            return
        if status is not None:
            self.record.status_code = status
        self.record.error = error
        await self.run.close()
        self.record.take_usage(self.run.usage)
        await _save(self.caller, self.record)


async def start_generation(
    caller: Caller,
    *,
    endpoint: str,
    model: str | None,
    stream: bool,
    sequences: int,
    prepare: Callable[[EngineClient, RequestDefaults], Job],
) -> ApiRun:
    """Admit, prepare and submit one API request; failures are logged as the request's row and re-raised."""
    record = RequestRecord(endpoint=endpoint, stream=stream, model=model or "")

    async def prepare_job(engine: EngineClient) -> Job:
        if isinstance(engine, EmbeddingClient):  # an embedding model generates nothing
            raise only_for_embeddings(model_name(engine, model))
        # The console's defaults are a DB read: on Django's thread-sensitive path, like auth and usage.
        defaults = await request_defaults_shared(model=model_name(engine, model))
        # Templates, tokenization and grammar compilation are CPU work: off the event loop.
        job = await asyncio.to_thread(prepare, engine, defaults)
        record.model, record.prompt_text = job.model, job.prompt_text
        return job

    request = GenerationRequest(
        endpoint=endpoint,
        model=model,
        limit_checks=caller.limit_checks,
        prepare=prepare_job,
        sequences=sequences,
        deadline=asyncio.get_running_loop().time() + request_timeout_s(),
        viewer=caller.viewer,
    )
    try:
        run = await get_runtime().generation.start(request)
    except BaseException as exc:
        record.fail_with(exc)
        await asyncio.shield(_save(caller, record))
        raise
    return ApiRun(run, caller, record)


async def _save(caller: Caller, record: RequestRecord) -> None:
    await request_record_save(record=record, user_id=caller.user_id, api_key_id=caller.api_key_id)
