"""Users and keys from the console, and the limits set there enforced by the API with 429."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.models import ApiKey, DailyUsage, UserApiLimits
from webapp.console.models import AuditLog
from webapp.serving.runtime import get_runtime


@pytest.fixture
def api_engine(settings: Any) -> Iterator[FakeEngine]:
    settings.MOONCAKE_API_AUTH = "required"
    engine = FakeEngine(model_name="fake-model", script="One two three.")
    get_runtime().install_manager(FakeModelManager.with_engine(engine, aliases=["default"]))
    yield engine
    get_runtime().install_manager(None)


def complete(secret: str) -> Any:
    return Client().post(
        "/v1/completions",
        data=json.dumps({"model": "fake-model", "prompt": "Count:", "max_tokens": 3}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )


def create_key(client: Client, user: User) -> str:
    response = client.post(reverse("console:key-create", args=[user.pk]), {"name": "ci"})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    page = response.content.decode()
    secret = page.split('<pre id="new-secret">', 1)[1].split("</pre>", 1)[0]
    assert secret.startswith("mc-")
    # Shown once: the next visit no longer has it, and nothing stored has it in clear.
    assert secret not in client.get(reverse("console:user", args=[user.pk])).content.decode()
    assert not ApiKey.objects.filter(secret_hash=secret).exists()
    assert_not_stored(secret)
    return secret


def assert_not_stored(secret: str) -> None:
    """No session row (the database backend keeps them encoded, not encrypted) holds the secret."""
    from django.contrib.sessions.models import Session

    assert all(secret not in str(row.get_decoded()) for row in Session.objects.all())


@pytest.mark.database
def test_create_user_and_manage_them(staff_client: Client, staff: User) -> None:
    data = {"username": "newbie", "password": "a-long-password-42", "is_staff": ""}
    response = staff_client.post(reverse("console:users"), data)
    user = User.objects.get(username="newbie")
    assert response["Location"] == reverse("console:user", args=[user.pk])
    assert user.check_password("a-long-password-42") and not user.is_staff

    staff_client.post(reverse("console:user-toggle", args=[user.pk, "staff"]))
    staff_client.post(reverse("console:user-toggle", args=[user.pk, "active"]))
    user.refresh_from_db()
    assert user.is_staff and not user.is_active

    reset = staff_client.post(reverse("console:user-password", args=[user.pk]))
    assert reset.status_code == 200 and "no-store" in reset["Cache-Control"]
    password = reset.content.decode().split('<pre id="new-password">', 1)[1].split("</pre>", 1)[0]
    user.refresh_from_db()
    assert user.check_password(password)
    assert_not_stored(password)
    assert password not in staff_client.get(reverse("console:user", args=[user.pk])).content.decode()
    actions = list(AuditLog.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["user.create", "user.staff", "user.active", "user.reset_password"]
    staff_entry = AuditLog.objects.get(action="user.staff")
    assert staff_entry.before == {"is_active": True, "is_staff": False, "is_superuser": False}
    assert staff_entry.after == {"is_active": True, "is_staff": True, "is_superuser": False}


@pytest.mark.database
def test_weak_or_duplicate_users_are_refused(staff_client: Client, staff: User) -> None:
    weak = staff_client.post(reverse("console:users"), {"username": "w", "password": "123"})
    assert weak.status_code == 400 and "too short" in weak.content.decode()
    dup = staff_client.post(reverse("console:users"), {"username": "ROOT", "password": "a-long-password-42"})
    assert dup.status_code == 400 and "already exists" in dup.content.decode()


def test_admins_cannot_lock_themselves_out(staff_client: Client, staff: User) -> None:
    for field in ("active", "staff"):
        staff_client.post(reverse("console:user-toggle", args=[staff.pk, field]))
    staff.refresh_from_db()
    assert staff.is_active and staff.is_staff
    assert staff_client.post(reverse("console:user-toggle", args=[staff.pk, "bogus"])).status_code == 404


@pytest.mark.database
def test_keys_list_revoke(staff_client: Client, plain: User, api_engine: FakeEngine) -> None:
    secret = create_key(staff_client, plain)
    key = ApiKey.objects.get(user=plain)
    assert complete(secret).status_code == 200
    page = staff_client.get(reverse("console:user", args=[plain.pk])).content.decode()
    assert key.prefix in page and "never" not in page.split(key.prefix, 1)[1].split("</tr>", 1)[0]
    staff_client.post(reverse("console:key-revoke", args=[key.pk]))
    assert complete(secret).status_code == 401
    assert "revoked" in staff_client.get(reverse("console:user", args=[plain.pk])).content.decode()
    assert AuditLog.objects.filter(action__startswith="key.").count() == 2


@pytest.mark.database
def test_key_limit_set_in_console_gives_429(
    staff_client: Client, plain: User, api_engine: FakeEngine
) -> None:
    secret = create_key(staff_client, plain)
    key = ApiKey.objects.get(user=plain)
    prefix = f"k{key.pk}-"
    limits = {
        prefix + "requests_per_minute": "2",
        prefix + "tokens_per_minute": "",
        prefix + "max_concurrent_requests": "",
    }
    staff_client.post(reverse("console:key-limits", args=[key.pk]), limits)
    key.refresh_from_db()
    assert key.requests_per_minute == 2
    assert [complete(secret).status_code for _ in range(3)] == [200, 200, 429]
    entry = AuditLog.objects.get(action="key.limits")
    assert entry.before == {
        "requests_per_minute": None,
        "tokens_per_minute": None,
        "max_concurrent_requests": None,
        "daily_token_quota": None,
    }
    assert (entry.after or {})["requests_per_minute"] == 2


@pytest.mark.database
def test_user_limit_set_in_console_gives_429(
    staff_client: Client, plain: User, api_engine: FakeEngine
) -> None:
    first, second = create_key(staff_client, plain), create_key(staff_client, plain)
    data = {"requests_per_minute": "1", "tokens_per_minute": "", "max_concurrent_requests": ""}
    staff_client.post(reverse("console:user-limits", args=[plain.pk]), data)
    assert UserApiLimits.objects.get(user=plain).requests_per_minute == 1
    assert complete(first).status_code == 200
    response = complete(second)  # another key of the same user shares the user's limit
    assert response.status_code == 429 and response.json()["error"]["type"] == "rate_limit_error"
    assert AuditLog.objects.get(action="user.limits").after == {
        "requests_per_minute": 1, "tokens_per_minute": None, "max_concurrent_requests": None,
        "daily_token_quota": None,
    }  # fmt: skip


def test_bad_limits_are_refused(staff_client: Client, plain: User) -> None:
    staff_client.post(reverse("console:user-limits", args=[plain.pk]), {"requests_per_minute": "0"})
    assert not UserApiLimits.objects.exists()
    assert not AuditLog.objects.exists()


@pytest.mark.database
def test_daily_usage_totals(staff_client: Client, plain: User, api_engine: FakeEngine) -> None:
    secret = create_key(staff_client, plain)
    for _ in range(2):
        assert complete(secret).status_code == 200
    row = DailyUsage.objects.get(user=plain)
    assert row.requests == 2
    page = staff_client.get(reverse("console:user", args=[plain.pk])).content.decode()
    usage = page.split("<h2>Daily usage</h2>", 1)[1].split("</table>", 1)[0]
    assert f"<td>2</td><td>0</td><td>{row.prompt_tokens}</td><td>{row.completion_tokens}</td>" in usage
    assert f"2 req, {row.prompt_tokens + row.completion_tokens} tok" in page
