"""AsyncEngine over the fake runner: streaming, abort by closing the iterator, dead state, shutdown."""

import asyncio
import time

import pytest

from inference import (
    AsyncEngine,
    EngineDeadError,
    PromptTooLongError,
    QueueFullError,
    RequestFailedError,
    SamplingParams,
)
from inference.frontends.local.admission import AdmissionGate
from tests.inference.fakes import ByteTokenizer, fake_engine, reference_greedy

TOK = ByteTokenizer()
LONG = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)


@pytest.fixture
def engine():
    eng = AsyncEngine(fake_engine(max_model_len=200, max_queue_len=3))
    yield eng
    eng.shutdown()


async def wait_for(predicate, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def slow_steps(engine: AsyncEngine, seconds: float = 0.01) -> None:
    """On a loaded machine, a request's 100 fast steps can all finish before an abort or a poll arrives."""
    execute = engine.engine.runner.execute
    engine.engine.runner.execute = lambda chunks: (time.sleep(seconds), execute(chunks))[1]


async def test_stream_matches_reference_and_ends_finished(engine):
    prompt = TOK.encode("hello there")
    outs = [
        o async for o in engine.generate(prompt, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    ]
    assert outs[-1].finished and not any(o.finished for o in outs[:-1])
    assert outs[-1].outputs[0].token_ids == reference_greedy(prompt, 8)
    assert [t for o in outs for t in o.outputs[0].delta_token_ids] == outs[-1].outputs[0].token_ids
    assert "".join(o.outputs[0].delta_text for o in outs) == outs[-1].outputs[0].text
    assert engine.health().state == "ready" and engine.stats().finished_by_reason == {"length": 1}


async def test_closing_the_iterator_aborts_and_frees_blocks(engine):
    slow_steps(engine)
    gen = engine.generate(TOK.encode("a long story"), LONG)
    async for _ in gen:
        break
    await gen.aclose()
    block_manager = engine.engine.scheduler.block_manager
    await wait_for(lambda: block_manager.num_used_blocks == 0 and engine.stats().num_running == 0)
    assert engine.stats().finished_by_reason == {"abort": 1}


async def test_cancelling_the_consumer_task_aborts(engine):
    slow_steps(engine)  # 100 fast steps can all finish between two polls of the running count

    async def consume():
        async for _ in engine.generate(TOK.encode("another story"), LONG):
            await asyncio.sleep(0.05)

    task = asyncio.create_task(consume())
    await wait_for(lambda: engine.stats().num_running == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: engine.engine.scheduler.block_manager.num_used_blocks == 0)


async def test_abort_from_elsewhere_ends_the_stream_with_abort(engine):
    slow_steps(engine)
    outs = []

    async def consume():
        async for out in engine.generate(TOK.encode("x"), LONG, request_id="r1"):
            outs.append(out)

    task = asyncio.create_task(consume())
    await wait_for(lambda: bool(outs))
    await engine.abort("r1")
    await asyncio.wait_for(task, 5)
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"


async def test_errors_before_the_first_output():
    llm = fake_engine(max_model_len=200, max_queue_len=2, max_num_seqs=1)
    execute = llm.runner.execute
    llm.runner.execute = lambda chunks: (time.sleep(0.02), execute(chunks))[1]  # keep requests queued
    engine = AsyncEngine(llm)
    with pytest.raises(PromptTooLongError):
        await anext(engine.generate(list(range(1, 250)), LONG))
    gens = [engine.generate([1, 2], LONG) for _ in range(4)]
    tasks = []
    for i, gen in enumerate(gens[:3]):
        tasks.append(asyncio.create_task(anext(gen)))
        await wait_for(lambda i=i: engine.stats().num_running == 1 and engine.stats().num_waiting == i)
    with pytest.raises(QueueFullError):
        await anext(gens[3])
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for gen in gens[:3]:
        await gen.aclose()
    engine.shutdown()


async def test_a_failing_step_ends_its_request_alone_and_the_engine_keeps_serving():
    engine = AsyncEngine(fake_engine())
    engine.engine.runner.fail_with = RuntimeError("CUDA exploded")
    with pytest.raises(RequestFailedError) as failed:
        async for _ in engine.generate([1, 2, 3], LONG):
            pass
    assert "CUDA exploded" not in str(failed.value)  # the cause is logged, not shown to callers
    assert engine.health().state == "ready"
    engine.engine.runner.fail_with = None
    outs = [o async for o in engine.generate([1, 2, 3], SamplingParams(temperature=0, max_tokens=4))]
    assert outs[-1].outputs[0].token_ids == reference_greedy([1, 2, 3], 4)
    assert engine.stats().num_running == engine.stats().num_waiting == 0
    engine.shutdown()


async def test_a_broken_engine_marks_dead_fails_every_stream_and_calls_back():
    # Each request runs alone but no batch runs: no request is at fault, the engine is.
    engine = AsyncEngine(fake_engine(max_model_len=200))
    runner = engine.engine.runner
    execute = runner.execute

    def batch_fails(chunks):
        if len(chunks) > 1:
            raise RuntimeError("batched kernel broke")
        return execute(chunks)

    runner.execute = batch_fails
    died = []
    engine.set_on_death(died.append)

    async def consume(i):
        async for _ in engine.generate([1, 2, i], LONG):
            pass

    results = await asyncio.gather(*(consume(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, EngineDeadError) for r in results), results
    assert engine.health().state == "dead" and "EngineBrokenError" in (engine.health().error or "")
    assert died == [engine]
    late = []
    engine.set_on_death(late.append)  # registering on a dead engine calls back at once
    assert late == [engine]
    with pytest.raises(EngineDeadError):
        await anext(engine.generate([1, 2, 3], LONG))
    engine.shutdown()


async def test_an_add_that_raises_fails_that_request_only(engine):
    add_request = engine.engine.add_request

    def add_or_explode(request_id, *args, **kwargs):
        if request_id == "bad":
            raise RuntimeError("tokenizer state broke")
        return add_request(request_id, *args, **kwargs)

    engine.engine.add_request = add_or_explode
    healthy = engine.generate([1, 2], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    await anext(healthy)
    with pytest.raises(RequestFailedError):
        await anext(engine.generate([5, 6], LONG, request_id="bad"))
    rest = [o async for o in healthy]
    assert rest[-1].outputs[0].token_ids == reference_greedy([1, 2], 3)
    assert engine.health().state == "ready"


async def test_shutdown_drains_then_aborts_leftovers():
    engine = AsyncEngine(fake_engine(max_model_len=200))
    short = engine.generate([1, 2], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    first = await anext(short)
    assert not first.finished
    await asyncio.to_thread(engine.shutdown, drain_timeout=2.0)
    rest = [o async for o in short]
    assert rest[-1].finished and rest[-1].outputs[0].finish_reason == "length"
    with pytest.raises(EngineDeadError):
        await anext(engine.generate([1], LONG))


async def test_chat_template_returns_token_ids(engine):
    ids = engine.apply_chat_template([{"role": "user", "content": "hi"}])
    assert TOK.decode(ids).endswith("<assistant>")


async def test_announced_burst_shares_the_first_step():
    # Requests announced with expect() but submitted over ~40 ms (more than the quiet gap) still start
    # together: an idle engine waits for announced callers instead of prefilling the first one alone.
    engine = AsyncEngine(fake_engine(max_model_len=200))
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    notices = [engine.expect().__enter__() for _ in range(4)]
    gens = []
    for i in range(4):
        gens.append(engine.generate(TOK.encode(f"burst {i}"), params))
        gens[-1] = asyncio.ensure_future(anext(gens[-1]))
        await asyncio.sleep(0.01)
    firsts = await asyncio.gather(*gens)
    for notice in notices:
        notice.__exit__(None, None, None)
    assert len({o.metrics.first_scheduled_time for o in firsts}) == 1
    assert engine.admission.announced == 0
    engine.shutdown()


async def test_a_notice_never_submitted_delays_the_first_step_at_most_burst_max():
    engine = AsyncEngine(fake_engine(max_model_len=200))
    with engine.expect():  # a caller that never submits (its preparation failed)
        started = time.monotonic()
        first = await anext(engine.generate([1, 2], SamplingParams(temperature=0, max_tokens=2)))
        waited = time.monotonic() - started
    assert first.outputs[0].token_ids and waited < engine.admission.max_s + 1.0
    assert engine.admission.announced == 0  # the notice left on exit
    engine.shutdown()


async def test_a_lone_request_is_not_held_for_the_burst_window():
    # Only the quiet gap may apply to an unannounced request, however long a burst may last.
    engine = AsyncEngine(fake_engine(max_model_len=200), admission=AdmissionGate(max_s=5.0))
    started = time.monotonic()
    await anext(engine.generate([1, 2], SamplingParams(temperature=0, max_tokens=2)))
    assert time.monotonic() - started < 1.0
    engine.shutdown()
