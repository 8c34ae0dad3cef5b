"""A graceful restart over the real model (CPU, fp32): queued requests move to the new engine and finish
with the tokens an undisturbed run gives; running ones drain (or are aborted at the drain timeout).

The restart is the one production uses: the console's model restart calls ModelManager.reconfigure,
which hands the old engine's never-started requests, streams intact, to the engine it loads next.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from inference import (
    AsyncEngine,
    EngineConfig,
    EngineDeadError,
    LLMEngine,
    ModelManager,
    RequestOutput,
    SamplingParams,
)
from tests.inference.real_model import PLAIN, make_engine

pytestmark = pytest.mark.slow

# Short prompts, a few tokens, a small KV cache; the engine config is what the manager swaps.
BASE: dict[str, Any] = {
    "model": "default",
    "dtype": "float32",
    "device": "cpu",
    "max_model_len": 128,
    "kv_cache_memory_bytes": 8 << 20,
}
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
NUM_REQUESTS = 5


def config(max_num_seqs: int) -> EngineConfig:
    return EngineConfig(**BASE, max_num_seqs=max_num_seqs)


def real_manager(loaded: Any) -> ModelManager:
    """A manager whose engines run over the shared model (one at a time: a runner binds the model's KV)."""
    manager = ModelManager(
        engine_factory=lambda cfg: AsyncEngine(LLMEngine(cfg, loaded=loaded)), restart_backoff_s=0.05
    )
    manager.register("smol", config(max_num_seqs=2))
    return manager


def prompt_ids(loaded: Any) -> list[list[int]]:
    short = [*PLAIN[:2], PLAIN[3], "Hello, my name is", "The best way to learn"]
    return [list(loaded.tokenizer.encode(p)) for p in short[:NUM_REQUESTS]]


def undisturbed(loaded: Any, prompts: list[list[int]]) -> list[list[int]]:
    engine = make_engine(loaded, **BASE)
    return [out.outputs[0].token_ids for out in engine.generate(prompts, GREEDY)]


class Consumer:
    """Iterates one generate() stream in a task; keeps every output."""

    def __init__(self, engine: AsyncEngine, prompt: list[int], request_id: str) -> None:
        self.outputs: list[RequestOutput] = []
        self.gen = engine.generate(prompt, GREEDY, request_id=request_id)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for out in self.gen:
            self.outputs.append(out)

    async def result(self) -> RequestOutput:
        await asyncio.wait_for(self.task, 30)
        return self.outputs[-1]

    @property
    def streamed(self) -> list[int]:
        return [t for out in self.outputs for t in out.outputs[0].delta_token_ids]


async def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


def idle(engine: AsyncEngine) -> bool:
    stats = engine.stats()
    block_manager = engine.engine.scheduler.block_manager
    return (
        stats.num_running == stats.num_waiting == 0
        and block_manager.num_free_blocks == block_manager.num_blocks
        and not engine.engine.has_unfinished_requests()
    )


async def restart_under_load(
    manager: ModelManager, prompts: list[list[int]], *, drain_timeout: float
) -> tuple[AsyncEngine, AsyncEngine, list[Consumer]]:
    """Five requests on an engine that runs two at a time, then a restart with room for four."""
    old = await asyncio.to_thread(manager.load, "smol")
    consumers = [Consumer(old, p, f"r{i}") for i, p in enumerate(prompts)]
    await wait_for(lambda: old.stats().num_running == 2 and old.stats().num_waiting == NUM_REQUESTS - 2)
    await asyncio.to_thread(manager.reconfigure, "smol", config(max_num_seqs=4), drain_timeout=drain_timeout)
    new = manager.get("smol")
    assert new is not old and new.engine.config.max_num_seqs == 4
    return old, new, consumers


def test_restart_drains_running_and_moves_queued_to_the_new_engine(default_loaded):
    prompts = prompt_ids(default_loaded)
    expected = undisturbed(default_loaded, prompts)
    manager = real_manager(default_loaded)

    async def scenario() -> None:
        old, new, consumers = await restart_under_load(manager, prompts, drain_timeout=30.0)
        for consumer, tokens in zip(consumers, expected, strict=True):
            final = await consumer.result()
            assert final.finished and final.outputs[0].finish_reason == "length"
            assert consumer.streamed == final.outputs[0].token_ids == tokens
        # The first two drained on the old engine; the three queued ones ran only on the new one.
        assert old.stats().requests_total == 2 and old.stats().finished_by_reason == {"length": 2}
        assert idle(old)
        await wait_for(lambda: idle(new) and new.stats().finished_by_reason == {"length": 3})
        assert new.stats().requests_total == 3 and not new._worker._busy() and not old._worker._busy()
        info = manager.list()[0]
        assert info.state == "loaded" and info.requests_served == NUM_REQUESTS

    try:
        asyncio.run(scenario())
    finally:
        manager.unload("smol")


def test_restart_without_drain_aborts_running_and_still_runs_queued(default_loaded):
    prompts = prompt_ids(default_loaded)
    expected = undisturbed(default_loaded, prompts)
    manager = real_manager(default_loaded)

    async def scenario() -> None:
        old, new, consumers = await restart_under_load(manager, prompts, drain_timeout=0.0)
        for consumer, tokens in zip(consumers[:2], expected, strict=False):
            final = await consumer.result()  # a final output, not an error
            assert final.finished and final.outputs[0].finish_reason == "abort"
            assert len(final.outputs[0].token_ids) < len(tokens)
            assert final.outputs[0].token_ids == tokens[: len(final.outputs[0].token_ids)]
        for consumer, tokens in zip(consumers[2:], expected[2:], strict=True):
            final = await consumer.result()
            assert final.outputs[0].finish_reason == "length"
            assert consumer.streamed == final.outputs[0].token_ids == tokens
        assert idle(old) and old.stats().finished_by_reason == {"abort": 2}
        await wait_for(lambda: idle(new) and new.stats().finished_by_reason == {"length": 3})

    try:
        asyncio.run(scenario())
    finally:
        manager.unload("smol")


async def crash_under_load(manager: ModelManager, prompts: list[list[int]]) -> AsyncEngine:
    """Five requests (two running, three queued), then a batch fails although each request runs alone.

    No request is at fault, so the engine counts as broken and its thread ends.
    """
    engine = await asyncio.to_thread(manager.load, "smol")
    consumers = [Consumer(engine, p, f"r{i}") for i, p in enumerate(prompts)]
    await wait_for(lambda: engine.stats().num_running == 2 and engine.stats().num_waiting == NUM_REQUESTS - 2)
    runner: Any = engine.engine.runner
    execute = runner.execute

    def batches_fail(chunks: Any) -> Any:
        if len(chunks) > 1:
            runner.execute = execute
            raise RuntimeError("injected step failure")
        return execute(chunks)

    runner.execute = batches_fail
    for consumer in consumers:
        with pytest.raises(EngineDeadError):
            await consumer.result()
    assert engine.health().state == "dead" and "injected step failure" in (engine.health().error or "")
    return engine


async def wait_loaded(manager: ModelManager) -> AsyncEngine:
    await wait_for(lambda: manager.list()[0].state == "loaded")
    return manager.get("smol")


def test_a_crashed_engine_fails_every_stream_and_restarts_by_itself(default_loaded):
    # An engine-thread crash is not a graceful restart: nothing is handed over. Every request, running or
    # queued, ends with EngineDeadError; the manager then loads a fresh engine over the same model.
    prompts = prompt_ids(default_loaded)
    expected = undisturbed(default_loaded, prompts)
    manager = real_manager(default_loaded)

    async def scenario() -> None:
        old = await crash_under_load(manager, prompts)
        with pytest.raises(EngineDeadError):
            await anext(old.generate(prompts[0], GREEDY))
        new = await wait_loaded(manager)
        assert new is not old and new.health().state == "ready" and manager.list()[0].restarts == 1
        again = [Consumer(new, p, f"again{i}") for i, p in enumerate(prompts)]
        for consumer, tokens in zip(again, expected, strict=True):
            assert (await consumer.result()).outputs[0].token_ids == tokens
        await wait_for(lambda: idle(new))

    try:
        asyncio.run(scenario())
    finally:
        manager.unload("smol")


def test_a_dead_engine_reports_no_requests_and_its_successor_can_be_reaped(default_loaded):
    # Every stream of a dead engine has ended, so it serves nothing. Its stats must not keep reporting the
    # requests it held when it died (the /metrics gauges and the console read them), and the engine that
    # replaces it starts idle, so keep-alive reaping can still unload the model.
    manager = real_manager(default_loaded)
    manager.reconfigure("smol", config(max_num_seqs=2), keep_alive_seconds=60.0)

    async def scenario() -> None:
        dead = await crash_under_load(manager, prompt_ids(default_loaded))
        stats = dead.stats()
        assert (stats.num_running, stats.num_waiting, stats.kv_cache_usage) == (0, 0, 0.0)
        await wait_loaded(manager)
        assert manager.reap_idle(now=time.time() + 3600) == ["smol"]

    try:
        asyncio.run(scenario())
    finally:
        manager.unload("smol")
