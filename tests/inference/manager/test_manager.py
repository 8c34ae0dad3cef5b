import asyncio
import time

import pytest

from inference import AsyncEngine, EngineConfig, ModelManager, NoModelLoadedError, UnknownModelError
from inference.errors import InsufficientMemoryError
from tests.inference.fakes import fake_engine

ONE = fake_engine()
ENGINE_BYTES = sum(p.numel() * 4 for p in ONE.loaded.model.parameters()) + ONE.runner.kv_cache_bytes


def factory(config: EngineConfig) -> AsyncEngine:
    return AsyncEngine(fake_engine())


@pytest.fixture
def manager():
    m = ModelManager(memory_budget_bytes=int(ENGINE_BYTES * 2.5), engine_factory=factory)
    for name in ("a", "b", "c"):
        m.register(name, EngineConfig(model=f"/models/{name}"), aliases=[f"{name}-alias"])
    yield m
    for info in m.list():
        m.unload(info.name)


def test_register_get_default_and_aliases(manager):
    assert manager.default_name == "a"
    with pytest.raises(NoModelLoadedError):
        manager.get()
    with pytest.raises(UnknownModelError):
        manager.get("zzz")
    engine = manager.load("b-alias")
    manager.set_default("b")
    assert manager.get() is engine and manager.get("b-alias") is engine
    info = {i.name: i for i in manager.list()}["b"]
    assert info.state == "loaded" and info.is_default and info.memory_bytes == ENGINE_BYTES
    assert info.architecture == "FakeForCausalLM" and info.kv_capacity_tokens == 256
    with pytest.raises(ValueError):
        manager.register("b-alias", EngineConfig())


def test_a_models_task_is_listed(manager):
    manager.register("embedder", EngineConfig(model="minilm", task="embed"))
    tasks = {info.name: info.task for info in manager.list()}
    assert tasks["embedder"] == "embed" and tasks["a"] == "generate"


def test_unload_forgets_the_memory_and_kv_figures(manager):
    manager.load("a")
    manager.unload("a")
    info = {i.name: i for i in manager.list()}["a"]
    assert info.state == "available" and info.memory_bytes is None and info.kv_capacity_tokens is None
    assert info.architecture == "FakeForCausalLM"  # what the model is stays known
    manager.load("a")
    info = {i.name: i for i in manager.list()}["a"]
    assert info.memory_bytes == ENGINE_BYTES and info.kv_capacity_tokens == 256


def test_lru_eviction_when_the_budget_is_exceeded(manager):
    manager.load("a")
    time.sleep(0.01)
    manager.load("b")
    time.sleep(0.01)
    manager.get("a")  # a is now the most recently used
    manager.load("c")
    states = {i.name: i.state for i in manager.list()}
    assert states == {"a": "loaded", "b": "available", "c": "loaded"}


def test_peek_is_not_use(manager):
    """Health probes and metric scrapes peek: they must not keep an idle model alive or away from eviction."""
    engine = manager.load("a")
    used = {i.name: i.last_used for i in manager.list()}["a"]
    time.sleep(0.01)
    assert manager.peek() is engine and manager.peek("a-alias") is engine
    assert {i.name: i.last_used for i in manager.list()}["a"] == used
    manager.get("a")
    assert {i.name: i.last_used for i in manager.list()}["a"] > used
    with pytest.raises(NoModelLoadedError):
        manager.peek("b")


def test_refusal_says_needed_and_available():
    m = ModelManager(memory_budget_bytes=int(ENGINE_BYTES * 1.5), evict_lru=False, engine_factory=factory)
    m.register("a", EngineConfig())
    m.register("b", EngineConfig())
    m.load("a")
    with pytest.raises(InsufficientMemoryError, match=f"needs {ENGINE_BYTES} bytes"):
        m.load("b")
    assert {i.name: i.state for i in m.list()} == {"a": "loaded", "b": "failed"}
    m.unload("a")


def test_requests_served_and_idle_keep_alive():
    m = ModelManager(engine_factory=factory)
    m.register("a", EngineConfig(), keep_alive_seconds=60)
    engine = m.load("a")

    async def one_request():
        return [o async for o in engine.generate([1, 2], _params())]

    assert asyncio.run(one_request())[-1].finished
    assert m.list()[0].requests_served == 1
    assert m.reap_idle() == []
    assert m.reap_idle(now=time.time() + 120) == ["a"]
    assert m.list()[0].state == "available" and m.list()[0].requests_served == 1
    m.unregister("a")
    assert m.list() == [] and m.default_name is None


def test_failed_load_is_reported():
    def boom(config):
        raise ValueError("no such file")

    m = ModelManager(engine_factory=boom)
    m.register("x", EngineConfig())
    with pytest.raises(ValueError):
        m.load("x")
    info = m.list()[0]
    assert info.state == "failed" and "no such file" in (info.error or "")


def _params():
    from inference import SamplingParams

    return SamplingParams(max_tokens=2)
