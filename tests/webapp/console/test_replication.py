"""Model state across replicas: two runtimes (each with its own real ModelManager over fake engines) share
the database, as two replicas do; what an admin does through one is applied by the other's sync."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F
from django.test import Client
from django.urls import reverse

from inference import EngineConfig, ModelManager
from tests.webapp.console.conftest import SizedFakeEngine, make_hf_dir
from webapp.console import lifecycle, replication
from webapp.console.models import Replica
from webapp.console.reconcile import reconcile
from webapp.console.replication import ModelSync, announce, model_sync
from webapp.console.startup import take_up_saved_models
from webapp.core.models import ModelRegistration
from webapp.serving.runtime import Runtime, install_runtime

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


class Replicas:
    """Named runtimes standing in for replica processes; `on(name)` makes one the process's runtime."""

    def __init__(self) -> None:
        self.runtimes: dict[str, Runtime] = {}
        self.engines: dict[str, list[SizedFakeEngine]] = {}

    def add(self, name: str) -> Runtime:
        engines: list[SizedFakeEngine] = []

        def build() -> ModelManager:
            def factory(config: EngineConfig) -> Any:
                engine = SizedFakeEngine(config)
                engines.append(engine)
                return engine

            manager = ModelManager(engine_factory=factory)
            manager.register("base", EngineConfig(model="default"), aliases=["default"])  # as from yaml
            return manager

        runtime = Runtime(manager_factory=build)
        runtime.service(ModelSync, lambda: ModelSync(name=name))
        self.runtimes[name], self.engines[name] = runtime, engines
        with self.on(name):
            take_up_saved_models()  # what the server's start hook does before its sync starts
        return runtime

    @contextlib.contextmanager
    def on(self, name: str) -> Iterator[Runtime]:
        previous = install_runtime(self.runtimes[name])
        try:
            yield self.runtimes[name]
        finally:
            install_runtime(previous)

    def sync(self, name: str) -> None:
        """One pass of `name`'s sync, then its jobs finished (the thread does the same on a timer)."""
        with self.on(name) as runtime:
            reconcile(model_sync())
            runtime.jobs.wait_all()

    def state(self, name: str, model: str) -> str:
        manager = self.runtimes[name].manager()
        return next((i.state for i in manager.list() if i.name == model), "not registered")

    def close(self) -> None:
        for runtime in self.runtimes.values():
            runtime.jobs.wait_all()
            runtime.close_services()


@pytest.fixture
def replicas(model_root: Path) -> Iterator[Replicas]:
    # model_root first: it changes the roots, which are part of every model's settings.
    group = Replicas()
    group.add("a")
    group.add("b")
    group.sync("a")  # both have seen the rows (as their first pass at start does)
    group.sync("b")
    yield group
    group.close()


def register_tiny(root: Path, replicas: Replicas) -> None:
    make_hf_dir(root / "tiny")
    with replicas.on("a") as runtime:
        lifecycle.model_register(name="tiny", source=str(root / "tiny"), aliases=["small"])
        runtime.jobs.wait_all()


def test_a_load_on_one_replica_is_applied_on_the_other_once(replicas: Replicas, model_root: Path) -> None:
    register_tiny(model_root, replicas)
    replicas.sync("b")
    assert replicas.state("b", "tiny") == "available"  # registered there too, not loaded
    with replicas.on("a") as runtime:
        lifecycle.model_load(name="tiny")
        runtime.jobs.wait_all()
    assert replicas.state("a", "tiny") == "loaded" and replicas.state("b", "tiny") == "available"
    replicas.sync("b")
    assert replicas.state("b", "tiny") == "loaded"
    # Keep-alive (or eviction) unloads it on b: the admin's load is not repeated by the next pass.
    replicas.runtimes["b"].manager().unload("tiny")
    replicas.sync("b")
    assert replicas.state("b", "tiny") == "available"
    with replicas.on("a") as runtime:
        lifecycle.model_unload(name="tiny")
        runtime.jobs.wait_all()
    replicas.sync("a")  # its own action is not applied twice
    assert len(replicas.engines["a"]) == 1 and replicas.state("a", "tiny") == "available"


def test_an_unload_reaches_the_other_replica_and_a_late_one_converges(
    replicas: Replicas, model_root: Path
) -> None:
    for name in ("a", "b"):
        replicas.runtimes[name].manager().load("base")
    with replicas.on("a") as runtime:
        lifecycle.model_unload(name="base")
        runtime.jobs.wait_all()
    replicas.sync("b")
    assert replicas.state("b", "base") == "available"
    register_tiny(model_root, replicas)
    with replicas.on("a") as runtime:
        lifecycle.model_load(name="tiny")
        lifecycle.model_set_default(name="tiny")
        runtime.jobs.wait_all()
    # A replica started now registers the saved models, takes the saved default, loads what was loaded,
    # and leaves the default model it would autoload unloaded, as the admin left it.
    late = replicas.add("c")
    replicas.sync("c")
    assert replicas.state("c", "tiny") == "loaded" and replicas.state("c", "base") == "available"
    assert late.manager().default_name == "tiny"
    assert ModelRegistration.objects.get(name="base").desired_state == "unloaded"


def test_the_default_model_is_the_same_everywhere(replicas: Replicas, model_root: Path) -> None:
    register_tiny(model_root, replicas)
    replicas.sync("b")
    with replicas.on("b"):
        lifecycle.model_set_default(name="tiny")
    assert replicas.runtimes["b"].manager().default_name == "tiny"
    replicas.sync("a")
    assert replicas.runtimes["a"].manager().default_name == "tiny"
    assert list(ModelRegistration.objects.filter(is_default=True).values_list("name", flat=True)) == ["tiny"]


def test_unregistering_on_one_replica_unregisters_everywhere(replicas: Replicas, model_root: Path) -> None:
    register_tiny(model_root, replicas)
    replicas.sync("b")
    replicas.runtimes["b"].manager().load("tiny")
    with replicas.on("a"):
        lifecycle.model_unregister(registration=ModelRegistration.objects.get(name="tiny"))
    replicas.sync("b")
    assert replicas.state("b", "tiny") == "not registered"
    assert replicas.engines["b"][-1].shutdown_calls  # unloaded first
    assert not ModelRegistration.objects.filter(name="tiny").exists()  # b did not save it back


def test_settings_changed_on_one_replica_restart_the_model_on_the_other(
    replicas: Replicas, staff_client: Client
) -> None:
    for name in ("a", "b"):
        replicas.runtimes[name].manager().load("base")
    row = ModelRegistration.objects.get(name="base")
    prefix = f"m{row.pk}-"
    with replicas.on("a") as runtime:
        response = staff_client.post(
            reverse("console:model-defaults", args=[row.pk]),
            {prefix + "dtype": "float32", prefix + "max_model_len": "512"},
            headers={"HX-Request": "true"},
        )
        assert "restarts to apply" in response.content.decode()
        runtime.jobs.wait_all()
    assert replicas.engines["a"][-1].config.max_model_len == 512
    replicas.sync("a")
    assert len(replicas.engines["a"]) == 2  # a restarted once, not again by its own sync
    replicas.sync("b")
    assert len(replicas.engines["b"]) == 2 and replicas.engines["b"][-1].config.max_model_len == 512
    assert replicas.state("b", "base") == "loaded"
    # The tuning page's engine settings too.
    with replicas.on("a") as runtime:
        response = staff_client.post(reverse("console:tuning"), tuning_form(max_num_seqs="3"))
        assert response.status_code == 302
        runtime.jobs.wait_all()
    replicas.sync("b")
    assert replicas.engines["b"][-1].config.max_num_seqs == 3


def tuning_form(**values: str) -> dict[str, str]:
    from webapp.console.forms import TuningForm
    from webapp.core.engine_settings import engine_settings_get

    form = TuningForm(instance=engine_settings_get())
    data = {name: "" if value is None else str(value) for name, value in form.initial.items()}
    for name, value in list(data.items()):
        if value in ("True", "False"):
            data[name] = "on" if value == "True" else ""
    return data | values


def test_heartbeats_show_each_replicas_state_on_the_models_page(
    replicas: Replicas, staff_client: Client
) -> None:
    replicas.runtimes["a"].manager().load("base")
    for name in ("a", "b"):
        with replicas.on(name):
            model_sync().heartbeat()
    assert {r.name for r in replication.live_replicas()} == {"a", "b"}
    with replicas.on("b"):
        html = staff_client.get(reverse("console:models")).content.decode()
    assert 'data-replica="a" data-state="loaded"' in html
    assert 'data-replica="b" data-state="available"' in html
    # A replica that stopped beating drops off.
    Replica.objects.filter(name="a").update(seen_at="2000-01-01T00:00:00Z")
    with replicas.on("b"):
        html = staff_client.get(reverse("console:models")).content.decode()
    assert "data-replica=" not in html


@pytest.mark.redis
def test_an_announcement_on_redis_wakes_the_other_replica(
    replicas: Replicas, redis_url: str, settings: Any, monkeypatch: pytest.MonkeyPatch, model_root: Path
) -> None:
    settings.REDIS_URL = redis_url
    monkeypatch.setattr(replication, "SYNC_INTERVAL_S", 3600.0)  # only the announcement can wake it
    register_tiny(model_root, replicas)
    with replicas.on("b") as runtime_b:  # b's sync thread acts on the process's runtime: b's, throughout
        runtime_b.started.set()
        model_sync().start(reconcile)
        deadline = time.monotonic() + 10
        while replicas.state("b", "tiny") != "available" and time.monotonic() < deadline:
            time.sleep(0.05)  # b's first pass registers it
        time.sleep(1.5)  # the listener is subscribed well before the announcement
        # What replica a's load saves and announces (its own runtime is not the process's here).
        rows = ModelRegistration.objects.filter(name="tiny")
        rows.update(desired_state="loaded", state_revision=F("state_revision") + 1)
        announce(ModelSync(name="a"))
        deadline = time.monotonic() + 10
        while replicas.state("b", "tiny") != "loaded" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert replicas.state("b", "tiny") == "loaded"
        model_sync().close()
