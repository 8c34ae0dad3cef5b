"""/health is 200 only when the default engine says ready; /version reports the package version."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.test import Client

from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.core.version import app_version
from webapp.serving.health import FAILED
from webapp.serving.runtime import get_runtime


@pytest.fixture
def no_manager() -> Iterator[None]:
    previous = get_runtime().peek_manager()
    get_runtime().install_manager(None)
    yield
    get_runtime().install_manager(previous)


def test_health_without_engine_is_503(client: Client, no_manager: None) -> None:
    response = client.get("/health")
    assert response.status_code == 503
    assert response.json()["status"] == "no_engine"
    assert response.json()["reason"]


def test_health_ready_is_200(client: Client, fake_manager: FakeModelManager) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["model"] == "fake-model"
    assert body["models"] == [{"name": "fake-model", "state": "loaded", "error": None}]
    assert response["Cache-Control"].startswith("max-age=0")


def test_health_while_loading_is_503(client: Client, no_manager: None) -> None:
    manager = FakeModelManager()
    manager.register("slow-model", None)
    manager.set_state("slow-model", "loading")
    get_runtime().install_manager(manager)
    response = client.get("/health")
    assert response.status_code == 503
    assert response.json()["status"] == "loading"


def test_health_when_load_failed_is_503(
    client: Client, no_manager: None, caplog: pytest.LogCaptureFixture
) -> None:
    manager = FakeModelManager()
    manager.register("broken", None)
    manager.set_state("broken", "failed", "out of memory")
    get_runtime().install_manager(manager)
    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "failed"
    # /health is public: the load error stays in the log, quoted there under the reference shown here.
    assert "out of memory" not in response.content.decode()
    reference = body["reason"].rsplit("request id ", 1)[1].rstrip(").")
    assert reference == response["X-Request-ID"]
    assert body["models"] == [{"name": "broken", "state": "failed", "error": FAILED}]
    assert any("out of memory" in r.getMessage() and reference in r.getMessage() for r in caplog.records)


def test_health_registered_but_not_loaded_is_503(client: Client, no_manager: None) -> None:
    manager = FakeModelManager()
    manager.register("idle", None)
    get_runtime().install_manager(manager)
    response = client.get("/health")
    assert response.status_code == 503
    assert response.json()["status"] == "no_model"


def test_health_engine_loading_state_is_503(
    client: Client, fake_manager: FakeModelManager, fake_engine: FakeEngine
) -> None:
    fake_engine.state = "loading"
    assert client.get("/health").status_code == 503


def test_health_dead_engine_is_503(
    client: Client, fake_manager: FakeModelManager, fake_engine: FakeEngine
) -> None:
    fake_engine.state = "dead"
    fake_engine.error = "CUDA error: device-side assert"
    response = client.get("/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "dead" and body["model"] == "fake-model"
    assert "CUDA" not in response.content.decode()
    assert body["reason"].endswith(f"(request id {response['X-Request-ID']}).")


def test_health_is_not_redirected_to_first_run_setup(client: Client, no_manager: None, db: None) -> None:
    assert client.get("/health").status_code == 503


def test_version(client: Client) -> None:
    response = client.get("/version")
    assert response.status_code == 200
    assert response.json() == {"version": app_version()}
    assert response.json()["version"] == "0.1.0"


def test_health_rejects_post(client: Client, fake_manager: FakeModelManager) -> None:
    assert client.post("/health").status_code == 405


def test_polling_logs_each_change_once(
    client: Client, no_manager: None, caplog: pytest.LogCaptureFixture
) -> None:
    manager = FakeModelManager()
    manager.register("slow", None)
    manager.set_state("slow", "loading")
    get_runtime().install_manager(manager)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert client.get("/health").status_code == 503
        manager.set_state("slow", "failed", "out of memory")
        reasons = {client.get("/health").json()["reason"] for _ in range(3)}
    assert not [r for r in caplog.records if r.name == "django.request"]  # no error line per poll
    ours = [r.getMessage() for r in caplog.records if r.name == "webapp.serving.health"]
    assert len(reasons) == 1  # every answer quotes the one reference the details were logged under
    reference = reasons.pop().rsplit("request id ", 1)[1].rstrip(").")
    assert ours == [
        "health: loading (Model slow is loading.)",
        f"Model slow failed to load (reference {reference}): out of memory",
        f"health: failed (Model slow failed to load; the details are in the server log (request id "
        f"{reference}).)",
    ]
