"""Groups obey the rule of the user pages (test_roles): an admin who is no owner may not limit another admin
or an owner through a group, neither by adding them to one, taking them out, changing the limits of a
group they are in, nor deleting it. Each path through the console's real views, and the services alone."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from webapp.accounts.limits import admission_checks
from webapp.accounts.models import GroupPolicy
from webapp.console import groups as group_services
from webapp.console.models import AuditLog

pytestmark = [pytest.mark.django_db, pytest.mark.database]

ROLES = {"user": {}, "admin": {"is_staff": True}, "owner": {"is_staff": True, "is_superuser": True}}
THROTTLE = {"requests_per_minute": "1", "daily_token_quota": "1"}


def _make(role: str, name: str) -> User:
    return User.objects.create_user(name, password=f"{name}-password-1", **ROLES[role])


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _group(*members: User) -> Group:
    group = group_services.group_create(name="team")
    group.user_set.add(*members)
    return group


def _limited(user: User) -> bool:
    """Whether any group limit or quota now applies to `user` (what the issue's owner met as a 429)."""
    try:
        checks = admission_checks(user_id=user.pk)
    except Exception:
        return True
    return any(bucket[0] == "group" for bucket, _ in checks)


# (actor role, member role) -> may the actor change that member's groups?
PAIRS = [
    ("owner", "user", True),
    ("owner", "admin", True),
    ("owner", "owner", True),
    ("admin", "user", True),
    ("admin", "admin", False),
    ("admin", "owner", False),
]


@pytest.mark.parametrize(("actor_role", "member_role", "allowed"), PAIRS)
def test_adding_a_member(actor_role: str, member_role: str, allowed: bool) -> None:
    actor, member = _make(actor_role, "actor"), _make(member_role, "member")
    group = _group()
    GroupPolicy.objects.filter(group=group).update(requests_per_minute=1)
    response = _client(actor).post(f"/console/groups/{group.pk}/members/", {"username": "member"})
    assert response.status_code == (302 if allowed else 403)
    assert group.user_set.filter(pk=member.pk).exists() is allowed
    assert _limited(member) is allowed
    if not allowed:
        assert f"Only an owner can change the groups of another {member_role}." in response.content.decode()
        assert not AuditLog.objects.exists()


@pytest.mark.parametrize(("actor_role", "member_role", "allowed"), PAIRS)
def test_removing_a_member(actor_role: str, member_role: str, allowed: bool) -> None:
    actor, member = _make(actor_role, "actor"), _make(member_role, "member")
    group = _group(member)
    response = _client(actor).post(f"/console/groups/{group.pk}/members/{member.pk}/remove/")
    assert response.status_code == (302 if allowed else 403)
    assert group.user_set.filter(pk=member.pk).exists() is not allowed


@pytest.mark.parametrize(("actor_role", "member_role", "allowed"), PAIRS)
def test_setting_the_policy_of_a_group(actor_role: str, member_role: str, allowed: bool) -> None:
    actor, member = _make(actor_role, "actor"), _make(member_role, "member")
    group = _group(member)
    response = _client(actor).post(f"/console/groups/{group.pk}/policy/", THROTTLE)
    assert response.status_code == (302 if allowed else 403)
    policy = GroupPolicy.objects.get(group=group)
    assert (policy.requests_per_minute == 1) is allowed
    assert _limited(member) is allowed
    if not allowed:
        assert "Only an owner can change the limits of a group with another admin or owner in it" in (
            response.content.decode()
        )


@pytest.mark.parametrize(("actor_role", "member_role", "allowed"), PAIRS)
def test_deleting_a_group(actor_role: str, member_role: str, allowed: bool) -> None:
    actor, member = _make(actor_role, "actor"), _make(member_role, "member")
    group = _group(member)
    response = _client(actor).post(f"/console/groups/{group.pk}/delete/")
    assert response.status_code == (302 if allowed else 403)
    assert Group.objects.filter(pk=group.pk).exists() is not allowed


def test_the_issues_path_leaves_the_owner_unthrottled() -> None:
    """Create a group, add the owner, throttle it: the add is refused, and so is throttling a group the
    owner is already in (put there by an owner)."""
    admin, owner = _make("admin", "admin"), _make("owner", "root")
    client = _client(admin)
    assert client.post("/console/groups/", {"name": "trap"}).status_code == 302
    trap = Group.objects.get(name="trap")
    assert client.post(f"/console/groups/{trap.pk}/members/", {"username": "root"}).status_code == 403
    assert client.post(f"/console/groups/{trap.pk}/policy/", THROTTLE).status_code == 302  # no admin in it
    trap.user_set.add(owner)  # as an owner (or the identity provider) would
    assert client.post(f"/console/groups/{trap.pk}/policy/", {"requests_per_minute": "2"}).status_code == 403
    assert GroupPolicy.objects.get(group=trap).requests_per_minute == 1
    trap.user_set.remove(owner)
    assert not _limited(owner)


def test_an_admin_may_limit_themselves_and_users_beside_them() -> None:
    admin, pat = _make("admin", "admin"), _make("user", "pat")
    group = _group(pat)
    client = _client(admin)
    assert client.post(f"/console/groups/{group.pk}/members/", {"username": "admin"}).status_code == 302
    assert client.post(f"/console/groups/{group.pk}/policy/", THROTTLE).status_code == 302
    assert _limited(admin) and _limited(pat)


@pytest.mark.parametrize(
    ("actor_role", "shown", "hidden"),
    [
        ("admin", ["group-owner-only"], ['id="group-delete"', "Save limits", "/remove/"]),
        ("owner", ['id="group-delete"', "Save limits", "/remove/"], ["group-owner-only"]),
    ],
)
def test_the_page_offers_exactly_what_the_server_allows(
    actor_role: str, shown: list[str], hidden: list[str]
) -> None:
    actor, other = _make(actor_role, "actor"), _make("admin", "other")
    group = _group(other)
    page = _client(actor).get(f"/console/groups/{group.pk}/").content.decode()
    for needle in shown:
        assert needle in page, needle
    for needle in hidden:
        assert needle not in page, needle


@pytest.mark.parametrize(
    ("call", "kwargs"),
    [
        (group_services.member_add, {"username": "other"}),
        (group_services.member_remove, {"user": "other"}),
        (group_services.policy_set, {"values": {"requests_per_minute": 1}}),
        (group_services.group_delete, {}),
    ],
)
def test_the_services_refuse_on_their_own(call: Any, kwargs: dict[str, Any]) -> None:
    admin, other = _make("admin", "admin"), _make("owner", "other")
    group = _group() if call is group_services.member_add else _group(other)
    if kwargs.get("user") == "other":
        kwargs = {**kwargs, "user": other}
    with pytest.raises(group_services.GroupRefused):
        call(actor=admin, group=group, **kwargs)
