"""The manager restarts an engine whose thread died, with a back-off and a limit, and reports it meanwhile."""

import asyncio
import threading
import time

import pytest

from inference import (
    AsyncEngine,
    EngineConfig,
    EngineDeadError,
    ModelManager,
    NoModelLoadedError,
    SamplingParams,
)
from tests.inference.fakes import fake_engine, reference_greedy

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


class Factory:
    """Fake engines whose batched steps can be broken on demand; loads can be made to fail too."""

    def __init__(self) -> None:
        self.engines: list[AsyncEngine] = []
        self.failing_loads = 0
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, config: EngineConfig) -> AsyncEngine:
        self.gate.wait(5)
        if self.failing_loads:
            self.failing_loads -= 1
            raise OSError("weights unreadable")
        engine = AsyncEngine(fake_engine(max_model_len=200))
        self.engines.append(engine)
        return engine


def kill(engine: AsyncEngine) -> None:
    """Make the engine's next step fail in a way no single request explains, so its thread dies."""

    def broken(chunks):
        raise RuntimeError("device lost")

    engine.engine.runner.execute = broken
    engine.engine._failed_steps_in_a_row = 10**6  # the next failure is past the limit


async def fail_one(engine: AsyncEngine) -> None:
    with pytest.raises(EngineDeadError):
        async for _ in engine.generate([1, 2, 3], GREEDY):
            pass


def wait_state(manager: ModelManager, state: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while manager.list()[0].state != state:
        if time.monotonic() > deadline:
            raise AssertionError(f"state {manager.list()[0].state!r}, wanted {state!r}")
        time.sleep(0.005)


def make(factory: Factory, **kwargs) -> ModelManager:
    manager = ModelManager(engine_factory=factory, **kwargs)
    manager.register("m", EngineConfig(model="fake"))
    return manager


def test_a_dead_engine_is_restarted_and_serves_again():
    factory = Factory()
    manager = make(factory, restart_backoff_s=0.05)
    first = manager.load("m")
    factory.gate.clear()  # hold the restart so the in-between state can be seen
    kill(first)
    asyncio.run(fail_one(first))
    wait_state(manager, "restarting")
    info = manager.list()[0]
    assert "restarting" in (info.error or "") and info.restarts == 0
    assert info.memory_bytes is None and info.kv_capacity_tokens is None  # nothing is held meanwhile
    with pytest.raises(NoModelLoadedError):
        manager.get("m")
    factory.gate.set()
    wait_state(manager, "loaded")
    second = manager.get("m")
    assert second is not first and second.health().state == "ready"
    assert manager.list()[0].restarts == 1 and manager.list()[0].error is None
    assert manager.list()[0].memory_bytes and manager.list()[0].kv_capacity_tokens

    async def serve() -> list[int]:
        return [o async for o in second.generate([1, 2, 3], GREEDY)][-1].outputs[0].token_ids

    assert asyncio.run(serve()) == reference_greedy([1, 2, 3], 4)
    assert not first._worker.is_alive()  # the dead engine was shut down and joined
    manager.unload("m")


def test_deaths_past_the_limit_leave_the_model_failed():
    factory = Factory()
    manager = make(factory, max_restarts=2, restart_backoff_s=0.01)
    engine = manager.load("m")
    for restarts in range(2):
        kill(engine)
        asyncio.run(fail_one(engine))
        wait_state(manager, "loaded")
        engine = manager.get("m")
        assert manager.list()[0].restarts == restarts + 1
    kill(engine)
    asyncio.run(fail_one(engine))
    wait_state(manager, "failed")
    assert "not restarted again" in (manager.list()[0].error or "")
    time.sleep(0.1)
    assert manager.list()[0].state == "failed" and len(factory.engines) == 3
    manager.load("m")  # an explicit load still works
    assert manager.list()[0].state == "loaded"
    manager.unload("m")


def test_a_failed_reload_is_retried_with_back_off():
    factory = Factory()
    manager = make(factory, restart_backoff_s=0.02)
    first = manager.load("m")
    factory.failing_loads = 1
    kill(first)
    asyncio.run(fail_one(first))
    wait_state(manager, "loaded")
    assert len(factory.engines) == 2 and manager.list()[0].restarts == 1
    manager.unload("m")


def test_an_unload_cancels_a_pending_restart():
    factory = Factory()
    manager = make(factory, restart_backoff_s=0.3)
    first = manager.load("m")
    kill(first)
    asyncio.run(fail_one(first))
    wait_state(manager, "restarting")
    manager.unload("m")
    assert manager.list()[0].state == "available"
    time.sleep(0.5)
    assert manager.list()[0].state == "available" and len(factory.engines) == 1


def test_on_loaded_runs_before_the_model_reads_loaded_on_every_load_and_restart():
    factory = Factory()
    states: list[str] = []
    managers: list[ModelManager] = []

    def on_loaded(engine: AsyncEngine) -> None:
        states.append(managers[0].list()[0].state)
        if len(states) == 2:
            raise RuntimeError("a broken hook does not fail the load")

    manager = ModelManager(engine_factory=factory, restart_backoff_s=0.01, on_loaded=on_loaded)
    managers.append(manager)
    manager.register("m", EngineConfig(model="fake"))
    first = manager.load("m")
    kill(first)
    asyncio.run(fail_one(first))
    wait_state(manager, "loaded")
    manager.reconfigure("m", EngineConfig(model="fake", max_num_seqs=4))
    assert states == ["loading", "loading", "loading"]
    assert len(factory.engines) == 3 and manager.list()[0].state == "loaded"
    manager.unload("m")
