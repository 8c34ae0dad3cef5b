"""The one generation service: limits before any work, one close per run, the slot freed on every path."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inference.api import NoModelLoadedError, QueueFullError, SamplingParams
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.core.errors import InvalidRequest, RateLimited, Unavailable
from webapp.serving.generation import GenerationRequest, GenerationRun, Prepared
from webapp.serving.limits import Limits
from webapp.serving.runtime import Runtime

ONE_AT_A_TIME = [("user", Limits(max_concurrent_requests=1, requests_per_minute=100))]


def request(prepare: Any, checks: Any = ONE_AT_A_TIME, **kwargs: Any) -> GenerationRequest[Prepared]:
    return GenerationRequest(endpoint="test", model=None, limit_checks=checks, prepare=prepare, **kwargs)


def prepared(ids: list[int] | None = None, max_tokens: int = 3) -> Any:
    async def prepare(engine: Any) -> Prepared:
        return Prepared(prompts=[ids or [1, 2, 3]], params=SamplingParams(max_tokens=max_tokens))

    return prepare


@pytest.fixture
def engine(runtime: Runtime) -> FakeEngine:
    engine = FakeEngine(script="one two three four five six")
    runtime.install_manager(FakeModelManager.with_engine(engine))
    return engine


async def drain(run: GenerationRun[Any]) -> list[str]:
    texts = [out.outputs[0].text async for _, out in run.outputs()]
    await run.close()
    return texts


async def test_a_run_streams_and_accounts_once(runtime: Runtime, engine: FakeEngine) -> None:
    closed: list[int] = []
    run = await runtime.generation.start(request(prepared()))

    async def record(r: GenerationRun[Any]) -> None:
        closed.append(r.usage.total_tokens)

    run.on_close(record)
    texts = await drain(run)
    await run.close()  # idempotent
    assert texts[-1] == "one two three " and closed == [3 + 3]
    assert run.usage.prompt_tokens == 3 and run.usage.completion_tokens == 3
    assert run.usage.finish_reasons == ["length"]
    # The slot is free again: the next request is admitted.
    await drain(await runtime.generation.start(request(prepared())))


async def test_refused_requests_cost_no_work(runtime: Runtime, engine: FakeEngine) -> None:
    calls: list[Any] = []

    async def prepare(engine: Any) -> Prepared:
        calls.append(engine)
        return await prepared()(engine)

    run = await runtime.generation.start(request(prepare))
    with pytest.raises(RateLimited) as info:
        await runtime.generation.start(request(prepare))
    assert info.value.code == "concurrent_requests" and len(calls) == 1
    await drain(run)


async def test_a_failing_prepare_frees_the_slot(runtime: Runtime, engine: FakeEngine) -> None:
    async def bad(engine: Any) -> Prepared:
        raise InvalidRequest("no", param="messages")

    for _ in range(3):  # with a concurrency of one, a leaked slot would refuse the second try
        with pytest.raises(InvalidRequest):
            await runtime.generation.start(request(bad))
    await drain(await runtime.generation.start(request(prepared())))


async def test_engine_refusal_at_submit_is_mapped_and_frees_the_slot(
    runtime: Runtime, engine: FakeEngine
) -> None:
    engine.queue_full = True
    with pytest.raises(Unavailable) as info:
        await runtime.generation.start(request(prepared()))
    assert info.value.code == "queue_full" and info.value.retry_after == 1
    assert isinstance(info.value.__cause__, QueueFullError)
    engine.queue_full = False
    await drain(await runtime.generation.start(request(prepared())))


async def test_no_model_is_a_503_before_prepare(runtime: Runtime) -> None:
    manager = FakeModelManager.with_engine(FakeEngine())
    manager.unregister(manager.default_name or "")
    runtime.install_manager(manager)
    with pytest.raises(Unavailable) as info:
        await runtime.generation.start(request(prepared()))
    assert info.value.code == "model_not_loaded"
    assert isinstance(info.value.__cause__, NoModelLoadedError)


async def test_sequences_hold_concurrency(runtime: Runtime, engine: FakeEngine) -> None:
    checks = [("user", Limits(max_concurrent_requests=3))]
    run = await runtime.generation.start(request(prepared(), checks, sequences=2))
    with pytest.raises(RateLimited):
        await runtime.generation.start(request(prepared(), checks, sequences=2))
    await drain(run)
    await drain(await runtime.generation.start(request(prepared(), checks, sequences=3)))


async def test_cancelled_consumer_aborts_the_engine_request(runtime: Runtime, engine: FakeEngine) -> None:
    engine.token_delay = 0.05
    run = await runtime.generation.start(request(prepared(max_tokens=50)))

    async def consume() -> None:
        async for _ in run.outputs():
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await run.close()
    assert engine.aborted and not engine.running
    await drain(await runtime.generation.start(request(prepared())))
