"""Graceful restart: running requests drain, queued ones move to the new engine with their streams intact."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inference import (
    AsyncEngine,
    EngineConfig,
    EngineDeadError,
    ModelManager,
    NoModelLoadedError,
    PromptTooLongError,
    RequestFailedError,
    RequestOutput,
    SamplingParams,
)
from inference.manager.handover import adopt_all, hand_over
from tests.inference.fakes import reference_greedy, slow_async_engine
from tests.inference.frontends.local.test_async_engine import wait_for

SHORT = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
LONG = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
PROMPTS = [[10 + i, 20, 30 + i] for i in range(5)]


def used_blocks(engine: AsyncEngine) -> int:
    return engine.engine.scheduler.block_manager.num_used_blocks


class Consumer:
    """Iterates one generate() stream in a task; keeps its outputs or its error."""

    def __init__(self, engine: AsyncEngine, prompt: list[int], params: SamplingParams, request_id: str):
        self.outputs: list[RequestOutput] = []
        self.gen = engine.generate(prompt, params, request_id=request_id)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for out in self.gen:
            self.outputs.append(out)

    async def result(self) -> list[RequestOutput]:
        await asyncio.wait_for(self.task, 10)
        return self.outputs

    @property
    def tokens(self) -> list[int]:
        return [t for o in self.outputs for t in o.outputs[0].delta_token_ids]


async def start_five(engine: AsyncEngine, params: SamplingParams) -> list[Consumer]:
    consumers = [Consumer(engine, p, params, f"r{i}") for i, p in enumerate(PROMPTS)]
    await wait_for(lambda: engine.stats().num_running == 2 and engine.stats().num_waiting == 3)
    return consumers


async def test_queued_requests_finish_on_the_successor_through_their_iterators() -> None:
    old, new = slow_async_engine(), slow_async_engine(max_num_seqs=4)
    consumers = await start_five(old, SHORT)
    queued = await asyncio.to_thread(hand_over, old, drain_timeout=5.0)
    assert [q.request_id for q in queued] == ["r2", "r3", "r4"]
    assert used_blocks(old) == 0 and old.stats().requests_total == 2
    assert all(c.outputs and c.outputs[-1].finished for c in consumers[:2])  # drained, not aborted
    adopt_all(new, queued)
    for consumer, prompt in zip(consumers, PROMPTS, strict=True):
        outputs = await consumer.result()
        assert outputs[-1].finished and outputs[-1].outputs[0].finish_reason == "length"
        assert consumer.tokens == outputs[-1].outputs[0].token_ids == reference_greedy(prompt, 6)
    assert new.stats().requests_total == 3 and new.stats().finished_by_reason == {"length": 3}
    await wait_for(lambda: used_blocks(new) == 0 and new.stats().num_running == 0)
    new.shutdown()


async def test_drain_timeout_aborts_running_and_keeps_queued() -> None:
    old, new = slow_async_engine(), slow_async_engine()
    consumers = await start_five(old, LONG)
    queued = await asyncio.to_thread(hand_over, old, drain_timeout=0.05)
    assert len(queued) == 3 and used_blocks(old) == 0
    for consumer in consumers[:2]:
        outputs = await consumer.result()
        assert outputs[-1].finished and outputs[-1].outputs[0].finish_reason == "abort"
    adopt_all(new, queued)
    await wait_for(lambda: new.stats().num_running == 2)
    for consumer in consumers[2:]:
        consumer.task.cancel()  # the abort must reach the new owner, not the stopped engine
    await asyncio.gather(*(c.task for c in consumers[2:]), return_exceptions=True)
    await wait_for(lambda: used_blocks(new) == 0 and new.stats().num_running + new.stats().num_waiting == 0)
    assert new.stats().finished_by_reason == {"abort": 3}
    new.shutdown()


async def test_closing_an_adopted_iterator_aborts_on_the_new_engine() -> None:
    old, new = slow_async_engine(), slow_async_engine()
    consumers = await start_five(old, SHORT)
    queued = await asyncio.to_thread(hand_over, old, drain_timeout=5.0)
    adopt_all(new, queued)
    adopted = consumers[2]
    await wait_for(lambda: bool(adopted.outputs))
    adopted.task.cancel()  # the consumer goes away mid-stream
    await asyncio.gather(adopted.task, return_exceptions=True)
    await old.abort("r3")  # whoever still holds the old engine reaches the new owner too
    assert (await consumers[3].result())[-1].outputs[0].finish_reason == "abort"
    assert (await consumers[4].result())[-1].outputs[0].finish_reason == "length"
    await wait_for(lambda: new.stats().finished_by_reason == {"abort": 2, "length": 1})
    await wait_for(lambda: used_blocks(new) == 0)
    new.shutdown()


async def test_a_consumer_gone_before_adoption_is_not_adopted() -> None:
    old, new = slow_async_engine(), slow_async_engine()
    consumers = await start_five(old, SHORT)
    queued = await asyncio.to_thread(hand_over, old, drain_timeout=5.0)
    consumers[4].task.cancel()
    await asyncio.gather(consumers[4].task, return_exceptions=True)
    adopt_all(new, queued)
    for consumer in consumers[2:4]:
        assert (await consumer.result())[-1].finished
    assert new.stats().requests_total == 2
    new.shutdown()


async def test_a_prompt_that_no_longer_fits_gets_prompt_too_long() -> None:
    old, new = slow_async_engine(), slow_async_engine(max_model_len=44)  # 40 + 6 tokens no longer fit
    long_prompt = list(range(1, 41))
    runners = [Consumer(old, PROMPTS[i], LONG, f"run{i}") for i in range(2)]
    await wait_for(lambda: old.stats().num_running == 2)
    fits = Consumer(old, [1, 2], SHORT, "fits")
    too_long = Consumer(old, long_prompt, SHORT, "too-long")
    await wait_for(lambda: old.stats().num_waiting == 2)
    queued = await asyncio.to_thread(hand_over, old, drain_timeout=0.0)
    adopt_all(new, queued)
    with pytest.raises(PromptTooLongError):
        await too_long.result()
    assert (await fits.result())[-1].outputs[0].token_ids == reference_greedy([1, 2], 6)
    for consumer in runners:
        assert (await consumer.result())[-1].outputs[0].finish_reason == "abort"
    new.shutdown()


async def test_a_text_prompt_is_encoded_again_by_the_successor_and_fails_alone_if_it_cannot_be() -> None:
    old, new = slow_async_engine(), slow_async_engine()
    runners = [Consumer(old, PROMPTS[i], LONG, f"run{i}") for i in range(2)]
    await wait_for(lambda: old.stats().num_running == 2)
    text = Consumer(old, "hi", SHORT, "text")
    broken = Consumer(old, "\N{SNOWMAN}", SHORT, "broken")
    await wait_for(lambda: old.stats().num_waiting == 2)
    encode = new.text.encode

    def snowman_breaks(prompt: str | list[int]) -> list[int]:
        if prompt == "\N{SNOWMAN}":
            raise RuntimeError("this tokenizer cannot encode a snowman")
        return encode(prompt)

    new.text.encode = snowman_breaks  # type: ignore[method-assign]
    queued = await asyncio.to_thread(hand_over, old, drain_timeout=0.0)
    assert [q.request_id for q in queued] == ["text", "broken"]
    adopt_all(new, queued)
    with pytest.raises(RequestFailedError):
        await broken.result()
    assert (await text.result())[-1].outputs[0].token_ids == reference_greedy(list(b"hi"), 6)
    for consumer in runners:
        assert (await consumer.result())[-1].outputs[0].finish_reason == "abort"
    new.shutdown()


# ---- through the ModelManager ------------------------------------------------------------------------
def make_manager(fail_on: set[int]) -> ModelManager:
    def factory(config: EngineConfig) -> Any:
        if config.max_num_seqs in fail_on:
            raise RuntimeError("cannot load")
        return slow_async_engine(max_num_seqs=config.max_num_seqs, max_model_len=config.max_model_len or 200)

    manager = ModelManager(engine_factory=factory)
    manager.register("m", EngineConfig(model="fake", max_num_seqs=2), aliases=["m-old"])
    return manager


async def test_reconfigure_restarts_with_the_new_config_and_keeps_queued() -> None:
    manager = make_manager(fail_on=set())
    old = await asyncio.to_thread(manager.load, "m")
    consumers = await start_five(old, SHORT)
    restart = asyncio.create_task(
        asyncio.to_thread(
            manager.reconfigure,
            "m",
            EngineConfig(model="fake", max_num_seqs=4),
            aliases=["m-new"],
            drain_timeout=5.0,
        )
    )
    await wait_for(lambda: manager.list()[0].state == "loading")
    with pytest.raises(NoModelLoadedError):
        manager.get("m")
    await asyncio.wait_for(restart, 10)
    new = manager.get("m-new")
    assert new is not old and new.engine.config.max_num_seqs == 4
    for consumer, prompt in zip(consumers, PROMPTS, strict=True):
        assert (await consumer.result())[-1].finished
        assert consumer.tokens == reference_greedy(prompt, 6)
    info = manager.list()[0]
    assert info.state == "loaded" and info.aliases == ["m-new"] and info.requests_served == 5
    assert used_blocks(old) == 0
    await wait_for(lambda: used_blocks(new) == 0)
    manager.unload("m")


async def test_a_failed_reload_ends_the_queued_streams_with_an_error() -> None:
    manager = make_manager(fail_on={3})
    old = await asyncio.to_thread(manager.load, "m")
    consumers = await start_five(old, SHORT)
    with pytest.raises(RuntimeError, match="cannot load"):
        await asyncio.to_thread(
            manager.reconfigure, "m", EngineConfig(model="fake", max_num_seqs=3), drain_timeout=5.0
        )
    for consumer in consumers[:2]:
        assert (await consumer.result())[-1].outputs[0].finish_reason == "length"
    for consumer in consumers[2:]:
        with pytest.raises(EngineDeadError, match="failed to restart"):
            await consumer.result()
    info = manager.list()[0]
    assert info.state == "failed" and "cannot load" in (info.error or "")
    # A fixed config can be applied to the failed model and loaded again.
    await asyncio.to_thread(manager.reconfigure, "m", EngineConfig(model="fake", max_num_seqs=2))
    assert manager.list()[0].state == "available"
    await asyncio.to_thread(manager.load, "m")
    manager.unload("m")
