"""Load progress: the loader's steps reach whoever started the load (the model manager puts them on the
model's info, which the console shows), and nobody else."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from inference import AsyncEngine, EngineConfig, ModelManager
from inference.models.loader.load import load_model
from inference.models.loader.source import default_gguf_path
from inference.progress import (
    HASHING,
    LOADING_WEIGHTS,
    PLANNING,
    STARTING,
    LoadProgress,
    Throttled,
    report,
    reporting,
)
from tests.inference.fakes import fake_engine


def test_reports_reach_the_listener_of_this_context_only() -> None:
    report("nobody listens")  # no listener: nothing happens
    outer: list[LoadProgress] = []
    inner: list[LoadProgress] = []
    with reporting(outer.append):
        report("a", 1, 4)
        with reporting(inner.append):
            report("b")
        report("c")
        other = threading.Thread(target=report, args=("another thread",))
        other.start()
        other.join()
    report("after")
    assert [p.phase for p in outer] == ["a", "c"] and [p.phase for p in inner] == ["b"]
    assert outer[0].label == "a 1/4" and outer[0].fraction == 0.25 and outer[1].label == "c"


def test_a_broken_listener_never_fails_the_load() -> None:
    def broken(progress: LoadProgress) -> None:
        raise RuntimeError("listener bug")

    with reporting(broken):
        report("still fine")


def test_throttled_reports_the_first_and_the_last_step() -> None:
    seen: list[LoadProgress] = []
    with reporting(seen.append):
        step = Throttled("tensors", 1000, interval_s=3600)
        for done in range(1, 1001):
            step(done)
    assert [(p.done, p.total) for p in seen] == [(0, 1000), (1000, 1000)]


def test_the_manager_shows_the_phase_while_loading_and_clears_it_after() -> None:
    reached, release = threading.Event(), threading.Event()

    def factory(config: EngineConfig) -> AsyncEngine:
        report(LOADING_WEIGHTS, 120, 272)
        reached.set()
        release.wait(10)
        return AsyncEngine(fake_engine())

    manager = ModelManager(engine_factory=factory)
    manager.register("m", EngineConfig(model="/models/m"))
    loader = threading.Thread(target=manager.load, args=("m",))
    loader.start()
    try:
        assert reached.wait(10)
        info = manager.list()[0]
        assert (info.state, info.load_phase, info.load_done, info.load_total) == (
            "loading", LOADING_WEIGHTS, 120, 272,
        )  # fmt: skip
    finally:
        release.set()
        loader.join(10)
    info = manager.list()[0]
    assert info.state == "loaded" and info.load_phase is None
    report(PLANNING)  # after the load: reaches nobody, changes nothing
    assert manager.list()[0].load_phase is None
    manager.unload("m")


def test_an_engine_that_reports_nothing_reads_starting() -> None:
    reached, release = threading.Event(), threading.Event()

    def factory(config: EngineConfig) -> AsyncEngine:
        reached.set()
        release.wait(10)
        return AsyncEngine(fake_engine())

    manager = ModelManager(engine_factory=factory)
    manager.register("m", EngineConfig(model="/models/m"))
    loader = threading.Thread(target=manager.load, args=("m",))
    loader.start()
    assert reached.wait(10)
    assert manager.list()[0].load_phase == STARTING
    release.set()
    loader.join(10)
    manager.unload("m")


@pytest.mark.slow
def test_a_real_gguf_load_reports_its_phases(tmp_path: Path, test_cache_dir: Path) -> None:
    copy = tmp_path / "copy.gguf"  # a new path: hashed again (the memo is by path), converted from cache
    shutil.copyfile(default_gguf_path(), copy)
    seen: list[LoadProgress] = []
    with reporting(seen.append):
        load_model(str(copy), cache_dir=test_cache_dir, device="cpu")
    phases = [p.phase for p in seen]
    assert phases.index(HASHING) < phases.index(PLANNING) < phases.index(LOADING_WEIGHTS)
    hashing = [p for p in seen if p.phase == HASHING]
    assert hashing[-1].done == hashing[-1].total == copy.stat().st_size
    weights = [p for p in seen if p.phase == LOADING_WEIGHTS]
    assert weights[0].done == 0 and weights[-1].done == weights[-1].total and weights[-1].total
