"""Roles: user, admin (staff) and owner (superuser). Only owners act on admins and owners and make them;
an admin who is no owner acts on users only. Every (actor, target, action) pair, both directions, through
the console's real views, with the page offering exactly what the server allows."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.accounts.models import ApiKey, UserApiLimits
from webapp.accounts.services import api_key_create
from webapp.console.models import AuditLog

pytestmark = pytest.mark.django_db

ROLES = {"user": {}, "admin": {"is_staff": True}, "owner": {"is_staff": True, "is_superuser": True}}


def _make(role: str, name: str) -> User:
    return User.objects.create_user(name, password=f"{name}-password-1", **ROLES[role])


def _state(user: User) -> tuple[object, ...]:
    """Everything an action here could change on the account."""
    user.refresh_from_db()
    keys = list(ApiKey.objects.filter(user=user).values_list("revoked_at", "requests_per_minute"))
    limits = UserApiLimits.objects.filter(user=user).values_list("requests_per_minute", flat=True).first()
    return user.is_active, user.is_staff, user.is_superuser, user.password, keys, limits


def _post(client: Client, action: str, target: User) -> Any:
    key = ApiKey.objects.filter(user=target, revoked_at__isnull=True).first()
    urls = {
        "active": reverse("console:user-toggle", args=[target.pk, "active"]),
        "staff": reverse("console:user-toggle", args=[target.pk, "staff"]),
        "owner": reverse("console:user-toggle", args=[target.pk, "owner"]),
        "password": reverse("console:user-password", args=[target.pk]),
        "key-create": reverse("console:key-create", args=[target.pk]),
        "key-revoke": reverse("console:key-revoke", args=[key.pk]) if key else "",
        "key-limits": reverse("console:key-limits", args=[key.pk]) if key else "",
        "limits": reverse("console:user-limits", args=[target.pk]),
    }
    data = {"requests_per_minute": "7", f"k{key.pk if key else 0}-requests_per_minute": "7"}
    return client.post(urls[action], data)


# (actor role, target role) -> may the actor act on that account at all?
PAIRS = [
    ("owner", "user", True),
    ("owner", "admin", True),
    ("owner", "owner", True),
    ("admin", "user", True),
    ("admin", "admin", False),
    ("admin", "owner", False),
]
ACTIONS = ["active", "password", "key-create", "key-revoke", "key-limits", "limits"]


@pytest.mark.database
@pytest.mark.parametrize(("actor_role", "target_role", "allowed"), PAIRS)
@pytest.mark.parametrize("action", ACTIONS)
def test_who_may_act_on_whom(actor_role: str, target_role: str, allowed: bool, action: str) -> None:
    actor = _make(actor_role, "actor")
    target = _make(target_role, "target")
    api_key_create(user=target, name="existing")
    client = Client()
    client.force_login(actor)
    before = _state(target)
    limits_before = ApiKey.objects.get(user=target).requests_per_minute
    response = _post(client, action, target)
    if allowed:
        assert response.status_code in (200, 302), response.content[:300]
        changed = (
            _state(target) != before
            or ApiKey.objects.get(user=target, name="existing").requests_per_minute != limits_before
        )
        assert changed or action == "limits"
        assert AuditLog.objects.exists()
    else:
        assert response.status_code == 403
        assert "Only an owner can change another" in response.content.decode()
        assert _state(target) == before
        assert ApiKey.objects.get(user=target).requests_per_minute == limits_before
        assert not AuditLog.objects.exists()


@pytest.mark.parametrize(
    ("actor_role", "target_role", "action", "allowed"),
    [
        ("owner", "user", "staff", True),  # make an admin
        ("admin", "user", "staff", False),
        ("owner", "admin", "staff", True),  # remove an admin
        ("admin", "admin", "staff", False),
        ("owner", "user", "owner", True),  # make an owner
        ("owner", "owner", "owner", True),  # remove another owner
        ("admin", "user", "owner", False),
        ("admin", "admin", "owner", False),
    ],
)
def test_only_owners_make_or_unmake_admins_and_owners(
    actor_role: str, target_role: str, action: str, allowed: bool
) -> None:
    actor = _make(actor_role, "actor")
    target = _make(target_role, "target")
    client = Client()
    client.force_login(actor)
    before = _state(target)
    response = _post(client, action, target)
    assert (response.status_code == 302) is allowed
    assert (_state(target) != before) is allowed
    if not allowed:
        assert response.status_code == 403


def test_an_owner_cannot_unmake_themselves_and_an_owner_stays_an_admin() -> None:
    owner = _make("owner", "owner")
    other = _make("owner", "other")
    client = Client()
    client.force_login(owner)
    assert _post(client, "owner", owner).status_code == 403
    assert _state(owner)[2]
    response = _post(client, "staff", other)  # Remove admin on an owner: refused, the owner role first
    assert response.status_code == 302 and _state(other)[1:3] == (True, True)


@pytest.mark.database
@pytest.mark.parametrize(
    ("actor_role", "target_role", "shown", "hidden"),
    [
        ("admin", "admin", [], ["Deactivate", "Remove admin", "Reset password", "Create key", "Revoke"]),
        ("admin", "owner", [], ["Deactivate", "Remove owner", "Reset password", "Create key"]),
        (
            "admin",
            "user",
            ["Deactivate", "Reset password", "Create key", "Revoke"],
            ["Make admin", "Make owner"],
        ),
        ("owner", "admin", ["Deactivate", "Remove admin", "Make owner", "Reset password", "Create key"], []),
    ],
)
def test_the_page_offers_exactly_what_the_server_allows(
    actor_role: str, target_role: str, shown: list[str], hidden: list[str]
) -> None:
    actor = _make(actor_role, "actor")
    target = _make(target_role, "target")
    api_key_create(user=target, name="k")
    client = Client()
    client.force_login(actor)
    page = client.get(reverse("console:user", args=[target.pk])).content.decode()
    for label in shown:
        assert f">{label}<" in page, label
    for label in hidden:
        assert f">{label}<" not in page, label
