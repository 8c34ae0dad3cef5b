"""Applying tuning restarts a loaded engine gracefully: queued requests finish on the restarted engine."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inference import AsyncEngine, EngineConfig, ModelManager, RequestOutput, SamplingParams
from tests.inference.fakes import reference_greedy, slow_async_engine
from tests.webapp.console.test_tuning import VALID
from webapp.serving.runtime import get_runtime

pytestmark = pytest.mark.database

# The first two outlast the tuning POST (about a second of 10 ms steps); the other two wait behind them.
MAX_TOKENS = [100, 100, 6, 6]
PROMPTS = [[10 + i, 20, 30 + i] for i in range(4)]


@pytest.fixture
def real_manager() -> Iterator[ModelManager]:
    """The real manager over real AsyncEngines whose model is the fake runner (two sequences at a time)."""

    def factory(config: EngineConfig) -> Any:
        return slow_async_engine(max_num_seqs=config.max_num_seqs)

    previous = get_runtime().peek_manager()
    manager = ModelManager(engine_factory=factory)
    manager.register("base", EngineConfig(model="fake", max_num_seqs=2))
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().jobs.wait_all()
    manager.unload("base")
    get_runtime().install_manager(previous)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in its own thread: the consumers keep iterating while the restart job runs."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.close()


async def collect(engine: AsyncEngine, prompt: list[int], max_tokens: int) -> list[RequestOutput]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return [out async for out in engine.generate(prompt, params)]


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def test_tuning_restart_keeps_queued_requests(
    staff_client: Client, real_manager: ModelManager, loop: asyncio.AbstractEventLoop
) -> None:
    old = real_manager.load("base")
    futures = [
        asyncio.run_coroutine_threadsafe(collect(old, p, n), loop)
        for p, n in zip(PROMPTS, MAX_TOKENS, strict=True)
    ]
    wait_until(lambda: old.stats().num_running == 2 and old.stats().num_waiting == 2)

    assert staff_client.post(reverse("console:tuning"), VALID).status_code == 302
    get_runtime().jobs.wait_all()

    new = real_manager.get("base")
    assert new is not old and new.engine.config.max_num_seqs == 8  # the new tuning applies
    for future, prompt, n in zip(futures, PROMPTS, MAX_TOKENS, strict=True):
        outputs = future.result(timeout=10)
        assert outputs[-1].finished and outputs[-1].outputs[0].token_ids == reference_greedy(prompt, n)
    assert old.stats().requests_total == 2 and new.stats().requests_total == 2  # the queued two moved
    assert old.engine.scheduler.block_manager.num_used_blocks == 0
    wait_until(lambda: new.engine.scheduler.block_manager.num_used_blocks == 0)
