"""Loading a model when a user picks it (webapp.serving.on_demand) and the one vocabulary of model states
(webapp.serving.model_states): real ModelManagers over fake engines, the console's load path, two
replicas sharing the database."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inference import EngineConfig, ModelManager
from tests.webapp.console.conftest import SizedFakeEngine
from tests.webapp.console.test_replication import Replicas, register_tiny
from tests.webapp.fake_engine import FakeModelManager
from webapp.console.startup import take_up_saved_models
from webapp.core.errors import NotFound, Unavailable
from webapp.core.models import ModelRegistration
from webapp.serving import on_demand
from webapp.serving.model_states import ModelStatus, describe, state_label
from webapp.serving.on_demand import Memory, load_on_demand, memory_refusal, wait_loaded
from webapp.serving.runtime import Runtime, install_runtime

MIB = 1 << 20
FITS = lambda manager, info: Memory(needed=MIB, free=1024 * MIB)  # noqa: E731


@pytest.mark.parametrize(
    ("state", "trouble", "status", "label"),
    [
        ("loaded", None, ModelStatus.READY, "ready"),
        (
            "loaded",
            "the upstream is unreachable",
            ModelStatus.UNAVAILABLE,
            "unavailable: the upstream is unreachable",
        ),
        ("loading", None, ModelStatus.LOADING, "loading…"),
        ("restarting", None, ModelStatus.LOADING, "loading…"),
        ("downloading", None, ModelStatus.LOADING, "loading… (downloading)"),
        ("available", None, ModelStatus.NOT_LOADED, "not loaded (loads when picked)"),
        ("failed", None, ModelStatus.UNAVAILABLE, "unavailable: failed to load"),
        ("unloading", None, ModelStatus.UNAVAILABLE, "unavailable: being unloaded"),
    ],
)
def test_one_vocabulary_for_every_state(
    state: str, trouble: str | None, status: ModelStatus, label: str
) -> None:
    view = describe(state, trouble=trouble)
    assert (view.status, view.label) == (status, label) and state_label(state, trouble) == label


def test_the_template_filter_words_states_the_same() -> None:
    from django.template import engines

    template = engines["django"].from_string(
        "{% load model_states %}{{ s|model_state }}|{{ s|model_state:t }}"
    )
    assert (
        template.render({"s": "available", "t": ""})
        == "not loaded (loads when picked)|not loaded (loads when picked)"
    )
    assert template.render({"s": "loaded", "t": "down"}) == "ready|unavailable: down"


def _manager(*states: tuple[str, str, int]) -> FakeModelManager:
    """A manager with models (name, state, memory_bytes)."""
    manager = FakeModelManager()
    for name, state, memory in states:
        manager.register(name, None)
        manager.set_state(name, state)  # type: ignore[arg-type]
        manager._infos[name].memory_bytes = memory
    return manager


def test_a_loaded_model_is_ready_and_starts_nothing(runtime: Runtime) -> None:
    started: list[str] = []
    manager = _manager(("smol", "loaded", 100 * MIB))
    assert (
        load_on_demand(name="smol", manager=manager, memory=FITS, start=started.append) == ModelStatus.READY
    )
    assert load_on_demand(name=None, manager=manager, memory=FITS, start=started.append) == ModelStatus.READY
    assert started == []


def test_a_model_that_fits_starts_loading_once_and_a_loading_one_is_waited_for(runtime: Runtime) -> None:
    started: list[str] = []
    manager = _manager(("smol", "loaded", 100 * MIB), ("big", "available", 0))
    assert (
        load_on_demand(name="big", manager=manager, memory=FITS, start=started.append) == ModelStatus.LOADING
    )
    manager.set_state("big", "loading")
    assert (
        load_on_demand(name="big", manager=manager, memory=FITS, start=started.append) == ModelStatus.LOADING
    )
    assert started == ["big"]


def test_too_little_memory_names_the_model_and_what_holds_the_memory(runtime: Runtime) -> None:
    started: list[str] = []
    manager = _manager(("smol", "loaded", 100 * MIB), ("big", "available", 0))
    short = lambda m, i: Memory(needed=300 * MIB, free=150 * MIB)  # noqa: E731
    with pytest.raises(Unavailable) as refused:
        load_on_demand(name="big", manager=manager, memory=short, start=started.append)
    assert refused.value.code == "model_unavailable" and started == []
    assert refused.value.message == (
        "big is not loaded, and there is not enough memory to load it beside smol (it needs about 0.29 GiB "
        "and 0.15 GiB is free). An administrator can unload smol in the console."
    )
    alone = _manager(("big", "available", 0))
    message = memory_refusal(alone, alone.list()[0], Memory(needed=2 * MIB, free=MIB, source="the budget"))
    assert message is not None and "under the budget" in message and "raise the memory budget" in message


def test_the_budget_less_the_loaded_models_is_what_is_free(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = _manager(("smol", "loaded", 100 * MIB), ("big", "available", 0))
    monkeypatch.setattr(on_demand, "_estimate", lambda info: (80 * MIB, 10_000 * MIB))
    manager.memory_budget_bytes = 150 * MIB
    with pytest.raises(Unavailable, match="beside smol"):
        load_on_demand(name="big", manager=manager, start=lambda name: None)
    manager.memory_budget_bytes = 200 * MIB
    assert load_on_demand(name="big", manager=manager, start=lambda name: None) == ModelStatus.LOADING
    # No budget: what the machine has free now decides.
    manager.memory_budget_bytes = None
    monkeypatch.setattr(on_demand, "_estimate", lambda info: (80 * MIB, 50 * MIB))
    with pytest.raises(Unavailable, match="beside smol"):
        load_on_demand(name="big", manager=manager, start=lambda name: None)


def test_a_model_whose_size_cannot_be_read_is_left_to_the_load(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(info: Any) -> None:
        raise ValueError("no config.json")

    monkeypatch.setattr(on_demand, "_estimate", unreadable)
    manager = _manager(("big", "available", 0))
    started: list[str] = []
    assert load_on_demand(name="big", manager=manager, start=started.append) == ModelStatus.LOADING
    assert started == ["big"]


def test_failed_unloading_unknown_and_no_model_are_refused_with_a_reason(runtime: Runtime) -> None:
    manager = _manager(("broken", "failed", 0), ("leaving", "unloading", 0))
    start = lambda name: None  # noqa: E731
    with pytest.raises(Unavailable, match="broken failed to load; an administrator can see why"):
        load_on_demand(name="broken", manager=manager, memory=FITS, start=start)
    with pytest.raises(Unavailable, match="leaving is being unloaded"):
        load_on_demand(name="leaving", manager=manager, memory=FITS, start=start)
    with pytest.raises(NotFound, match="'ghost' does not exist"):
        load_on_demand(name="ghost", manager=manager, memory=FITS, start=start)
    with pytest.raises(Unavailable, match="No model is set up yet") as none:
        load_on_demand(name=None, manager=FakeModelManager(), memory=FITS, start=start)
    assert none.value.code == "no_model"
    # A load refused for memory is tried again: something may have been unloaded since.
    manager.set_state("broken", "failed", "InsufficientMemoryError: model 'broken' needs 5 bytes")
    assert load_on_demand(name="broken", manager=manager, memory=FITS, start=start) == ModelStatus.LOADING


async def test_waiting_ends_with_the_load_or_says_why_not(runtime: Runtime) -> None:
    manager = _manager(("big", "loading", 0))

    async def finish(state: str, error: str | None = None) -> None:
        await asyncio.sleep(0.05)
        manager.set_state("big", state, error)  # type: ignore[arg-type]

    task = asyncio.create_task(finish("loaded"))
    await wait_loaded(name="big", bound=5, manager=manager, poll=0.01)
    await task
    manager.set_state("big", "loading")
    task = asyncio.create_task(finish("failed", "InsufficientMemoryError: no room"))
    with pytest.raises(Unavailable, match="big could not be loaded: there is not enough memory"):
        await wait_loaded(name="big", bound=5, manager=manager, poll=0.01)
    await task
    manager.set_state("big", "loading")
    with pytest.raises(Unavailable, match="big is still loading") as slow:
        await wait_loaded(name="big", bound=0.05, manager=manager, poll=0.01)
    assert slow.value.code == "model_loading"


@pytest.fixture
def gated(settings: Any) -> Iterator[tuple[Runtime, list[SizedFakeEngine], threading.Event]]:
    """A runtime whose manager's loads wait for the event: picks made meanwhile find it loading."""
    engines: list[SizedFakeEngine] = []
    gate = threading.Event()

    def build() -> ModelManager:
        def factory(config: EngineConfig) -> Any:
            assert gate.wait(30)
            engine = SizedFakeEngine(config)
            engines.append(engine)
            return engine

        manager = ModelManager(engine_factory=factory)
        manager.register("base", EngineConfig(model="default"), aliases=["default"])
        manager.register("other", EngineConfig(model="default"))
        return manager

    runtime = Runtime(manager_factory=build)
    previous = install_runtime(runtime)
    take_up_saved_models()
    try:
        yield runtime, engines, gate
    finally:
        gate.set()
        runtime.jobs.wait_all()
        runtime.close_services()
        install_runtime(previous)


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
def test_concurrent_picks_of_one_model_start_one_load(
    gated: tuple[Runtime, list[SizedFakeEngine], threading.Event],
) -> None:
    runtime, engines, gate = gated
    results: list[ModelStatus] = []
    errors: list[BaseException] = []

    def pick() -> None:
        try:
            results.append(load_on_demand(name="other", memory=FITS))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pick) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and results == [ModelStatus.LOADING] * 8
    assert [job.kind for job in runtime.jobs.list()] == ["load"]  # the console's load, started once
    gate.set()
    runtime.jobs.wait_all()
    assert len(engines) == 1
    assert next(i.state for i in runtime.manager().list() if i.name == "other") == "loaded"
    # Saved as the console saves an administrator's load: every replica loads it too.
    assert ModelRegistration.objects.get(name="other").desired_state == ModelRegistration.Desired.LOADED


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
def test_a_model_loaded_on_demand_reads_the_same_on_every_replica(
    replicas: Replicas, model_root: Path
) -> None:
    register_tiny(model_root, replicas)
    replicas.sync("b")
    with replicas.on("a") as runtime:
        assert load_on_demand(name="small", memory=FITS) == ModelStatus.LOADING  # by its alias
        runtime.jobs.wait_all()
    assert replicas.state("a", "tiny") == "loaded"
    replicas.sync("b")
    assert replicas.state("b", "tiny") == "loaded"
    with replicas.on("b"):
        assert load_on_demand(name="tiny", memory=FITS) == ModelStatus.READY


@pytest.fixture
def replicas(model_root: Path) -> Iterator[Replicas]:
    group = Replicas()
    group.add("a")
    group.add("b")
    group.sync("a")
    group.sync("b")
    yield group
    group.close()


@pytest.fixture
def model_root(tmp_path: Path, settings: Any) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    settings.MODEL_ROOTS = [root]
    return root
