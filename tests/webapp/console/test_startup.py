"""The runtime's start registers the console's saved models before the default model loads; requests
never do (they have no side effects on the manager)."""

from __future__ import annotations

import pytest
from django.test import Client

from inference import ModelManager
from webapp.core.models import ModelRegistration
from webapp.serving.runtime import Runtime


@pytest.mark.database
def test_start_registers_saved_models_then_loads_the_default(
    manager: ModelManager, runtime: Runtime, transactional_db: None
) -> None:
    # transactional_db: the start hook reads the table from the runtime's own thread.
    ModelRegistration.objects.create(name="saved", source="default", aliases=["kept"])
    runtime.start(reap_interval=3600)
    loader = runtime.threads[0]
    loader.join(timeout=30)
    assert not loader.is_alive()
    infos = {i.name: i for i in manager.list()}
    assert list(infos["saved"].aliases) == ["kept"]
    assert infos["base"].state == "loaded"
    runtime.stop()


def test_requests_do_not_register_models(manager: ModelManager, db: None) -> None:
    ModelRegistration.objects.create(name="saved", source="default")
    Client().get("/version")
    assert "saved" not in {i.name for i in manager.list()}


@pytest.mark.database
def test_stop_ends_the_reaper_and_unloads(
    manager: ModelManager, runtime: Runtime, transactional_db: None
) -> None:
    runtime.start(reap_interval=0.05)
    runtime.threads[0].join(timeout=30)
    assert runtime.stop(load_wait=5) == []
    runtime.threads[1].join(timeout=5)
    assert not runtime.threads[1].is_alive()
    assert all(info.state != "loaded" for info in manager.list())
