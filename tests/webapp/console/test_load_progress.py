"""The models table shows where a load is ("loading weights 120/272"), polled while it runs, from what the
engine's loader reports through the model manager."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inference import EngineConfig, ModelManager
from inference.progress import HASHING, LOADING_WEIGHTS, report
from tests.webapp.console.conftest import SizedFakeEngine
from webapp.serving.runtime import get_runtime


@pytest.fixture
def slow_load(request: pytest.FixtureRequest) -> Iterator[tuple[threading.Event, threading.Event]]:
    """A manager whose engine reports a step of its load (`request.param`, else 120 of 272 tensors), then
    waits to be released."""
    reached, release = threading.Event(), threading.Event()
    step = getattr(request, "param", (LOADING_WEIGHTS, 120, 272))

    def factory(config: EngineConfig) -> Any:
        report(*step)
        reached.set()
        release.wait(30)
        return SizedFakeEngine(config)

    previous = get_runtime().peek_manager()
    manager = ModelManager(engine_factory=factory)
    manager.register("slow", EngineConfig(model="default"))
    get_runtime().install_manager(manager)
    yield reached, release
    release.set()
    get_runtime().jobs.wait_all()
    get_runtime().install_manager(previous)


@pytest.mark.database
def test_the_table_shows_the_load_step_and_polls(
    staff_client: Client, slow_load: tuple[threading.Event, threading.Event]
) -> None:
    reached, release = slow_load
    staff_client.post(reverse("console:model-load", args=["slow"]), headers={"HX-Request": "true"})
    assert reached.wait(10)
    table = staff_client.get(reverse("console:models-table")).content.decode()
    assert 'data-state="loading"' in table and 'hx-trigger="every 1s"' in table
    assert f'<div class="load-progress" data-phase="{LOADING_WEIGHTS}">' in table
    assert '<progress max="272" value="120" aria-label="Load of slow">' in table
    assert f'<span class="load-phase">{LOADING_WEIGHTS} 120/272</span>' in table
    release.set()
    get_runtime().jobs.wait_all()
    table = staff_client.get(reverse("console:models-table")).content.decode()
    assert 'data-state="loaded"' in table and "load-progress" not in table


@pytest.mark.database
@pytest.mark.parametrize("slow_load", [(HASHING, 3 * 2**29, 2**32)], indirect=True)
def test_a_step_counted_in_bytes_reads_in_bytes(
    staff_client: Client, slow_load: tuple[threading.Event, threading.Event]
) -> None:
    reached, _ = slow_load
    staff_client.post(reverse("console:model-load", args=["slow"]), headers={"HX-Request": "true"})
    assert reached.wait(10)
    table = staff_client.get(reverse("console:models-table")).content.decode()
    assert f'<span class="load-phase">{HASHING} 1.5 GiB of 4.0 GiB</span>' in table
