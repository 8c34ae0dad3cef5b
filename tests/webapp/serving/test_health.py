"""/health is 200 only when the default engine says ready; /version reports the package version. Every caller
gets the overall state; the models, their states and load errors go only to callers who may use them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.services import api_key_create, api_key_revoke
from webapp.core.models import ModelRegistration
from webapp.core.version import app_version
from webapp.serving.model_access import restrictions_changed
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


@pytest.fixture
def api_auth_off(settings: Any) -> None:
    """As a local server runs: anonymous callers may use (and see) the public models."""
    settings.MOONCAKE_API_AUTH = "off"


def _reference(reason: str) -> str:
    return reason.rsplit("request id ", 1)[1].rstrip(").")


@pytest.mark.django_db
def test_health_ready_is_200(client: Client, fake_manager: FakeModelManager, api_auth_off: None) -> None:
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
    # Anonymous, with API keys required: the overall state only; the error stays in the log, quoted there
    # under the reference shown here.
    assert body["status"] == "failed" and set(body) == {"status", "reason"}
    assert "out of memory" not in response.content.decode() and "broken" not in response.content.decode()
    reference = _reference(body["reason"])
    assert reference == response["X-Request-ID"]
    assert any("out of memory" in r.getMessage() and reference in r.getMessage() for r in caplog.records)


@pytest.mark.django_db
def test_a_failed_models_reason_is_shown_to_its_users(client: Client, no_manager: None) -> None:
    """As docs/troubleshooting.md says: someone who may use the model is told why it failed."""
    manager = FakeModelManager()
    manager.register("broken", None)
    manager.set_state("broken", "failed", "HubDownloadError: broken is gated")
    get_runtime().install_manager(manager)
    client.force_login(User.objects.create_user("user", password="pw-user-1"))
    response = client.get("/health")
    body = response.json()
    assert response.status_code == 503 and body["status"] == "failed"
    reference = response["X-Request-ID"]
    assert body["reason"] == (
        f"Model broken failed to load: HubDownloadError: broken is gated (request id {reference})."
    )
    assert body["models"] == [
        {"name": "broken", "state": "failed", "error": "HubDownloadError: broken is gated"}
    ]


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
    assert body["status"] == "dead" and "model" not in body
    assert "CUDA" not in response.content.decode() and "fake-model" not in response.content.decode()
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


# ---- who sees which model ----------------------------------------------------------------------------------


@pytest.fixture
def open_and_secret(no_manager: None) -> Iterator[FakeModelManager]:
    """`open` (public, loaded, the default) and `secret` (restricted to the group research, loading)."""
    manager = FakeModelManager.with_engine(FakeEngine(model_name="open"))
    manager.register("secret", None)
    manager.set_state("secret", "loading")
    get_runtime().install_manager(manager)
    research = Group.objects.create(name="research")
    ModelRegistration.objects.create(name="secret", source="default", restricted=True).allowed_groups.add(
        research
    )
    restrictions_changed()
    yield manager
    restrictions_changed()


def _user(name: str, *groups: str, staff: bool = False) -> User:
    user = User.objects.create_user(name, password=f"pw-{name}-1", is_staff=staff)
    user.groups.add(*(Group.objects.filter(name=g).first() or Group.objects.create(name=g) for g in groups))
    return user


def _states(body: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["state"] for m in body["models"]}


@pytest.mark.django_db
def test_anonymous_callers_get_the_overall_state_only(
    client: Client, open_and_secret: FakeModelManager
) -> None:
    response = client.get("/health")  # API keys required, as in production
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    # Not even a wrong key, or one that was revoked, opens the list; and no 401 for a probe.
    key = api_key_create(user=_user("member", "research"), name="k")
    api_key_revoke(api_key=key.api_key)
    for secret in ("wrong", key.secret):
        response = client.get("/health", headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_with_api_auth_off_anonymous_callers_see_the_public_models(
    client: Client, open_and_secret: FakeModelManager, api_auth_off: None
) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert _states(response.json()) == {"open": "loaded"}  # what /v1/models lists them
    assert "secret" not in response.content.decode()


@pytest.mark.django_db
def test_a_restricted_default_model_is_not_named_to_others(
    client: Client, open_and_secret: FakeModelManager, api_auth_off: None
) -> None:
    open_and_secret.set_default("secret")
    body = client.get("/health").json()
    assert body == {
        "status": "loading",
        "model": None,
        "models": [{"name": "open", "state": "loaded", "error": None}],
        "reason": "The default model is loading.",
    }
    client.force_login(_user("member", "research"))
    body = client.get("/health").json()
    assert body["model"] == "secret" and body["reason"] == "Model secret is loading."


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("groups", "staff", "sees"),
    [
        (("research",), False, {"open": "loaded", "secret": "loading"}),
        (("sales",), False, {"open": "loaded"}),
        ((), True, {"open": "loaded", "secret": "loading"}),  # admins run every model
    ],
)
def test_a_logged_in_user_sees_the_states_of_their_models(
    client: Client,
    open_and_secret: FakeModelManager,
    groups: tuple[str, ...],
    staff: bool,
    sees: dict[str, str],
) -> None:
    client.force_login(_user("someone", *groups, staff=staff))
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["model"] == "open" and _states(body) == sees


@pytest.mark.django_db
@pytest.mark.parametrize(("groups", "sees"), [(("research",), {"open", "secret"}), (("sales",), {"open"})])
def test_an_api_key_sees_its_users_models(
    client: Client, open_and_secret: FakeModelManager, groups: tuple[str, ...], sees: set[str]
) -> None:
    secret = api_key_create(user=_user("someone", *groups), name="k").secret
    body = client.get("/health", headers={"Authorization": f"Bearer {secret}"}).json()
    assert set(_states(body)) == sees
