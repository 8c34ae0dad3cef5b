"""The console's Groups page and model access: create, rename, delete, members, limits and quota, who may
use a model; every change audited, bad input answered inline, and only staff get in."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from webapp.accounts.models import GroupPolicy
from webapp.console.models import AuditLog
from webapp.core.models import ModelRegistration
from webapp.serving.model_access import may_use, restrictions, viewer_for_user

pytestmark = pytest.mark.django_db


def _create(client: Client, name: str = "research") -> Group:
    response = client.post("/console/groups/", {"name": name, "description": "R&D"})
    assert response.status_code == 302, response.content
    return Group.objects.get(name=name)


@pytest.mark.database
def test_create_rename_and_delete_are_audited(staff_client: Client) -> None:
    group = _create(staff_client)
    assert GroupPolicy.objects.get(group=group).description == "R&D"
    page = staff_client.get("/console/groups/").content.decode()
    assert 'data-group="research"' in page
    assert staff_client.post(f"/console/groups/{group.pk}/rename/", {"name": "labs"}).status_code == 302
    assert Group.objects.get(pk=group.pk).name == "labs"
    assert staff_client.post(f"/console/groups/{group.pk}/delete/").status_code == 302
    assert not Group.objects.filter(pk=group.pk).exists()
    actions = list(AuditLog.objects.order_by("pk").values_list("action", flat=True))
    assert actions == ["group.create", "group.rename", "group.delete"]


@pytest.mark.database
def test_bad_names_are_refused_inline(staff_client: Client) -> None:
    _create(staff_client, "sales")
    response = staff_client.post("/console/groups/", {"name": "SALES"})
    assert response.status_code == 400 and "already exists" in response.content.decode()
    response = staff_client.post("/console/groups/", {"name": "   "})
    assert response.status_code == 400
    group = Group.objects.get(name="sales")
    other = _create(staff_client, "ops")
    response = staff_client.post(f"/console/groups/{other.pk}/rename/", {"name": "Sales"})
    assert response.status_code == 400 and "already exists" in response.content.decode()
    assert Group.objects.get(pk=other.pk).name == "ops" and group.name == "sales"


@pytest.mark.database
def test_members_join_and_leave(staff_client: Client, plain: User) -> None:
    group = _create(staff_client)
    url = f"/console/groups/{group.pk}/members/"
    assert staff_client.post(url, {"username": "PAT"}).status_code == 302  # usernames match case-blind
    assert list(group.user_set.values_list("username", flat=True)) == ["pat"]
    again = staff_client.post(url, {"username": "pat"})
    assert again.status_code == 400 and "already in" in again.content.decode()
    missing = staff_client.post(url, {"username": "nobody"})
    assert missing.status_code == 400 and "No user is named" in missing.content.decode()
    page = staff_client.get(f"/console/groups/{group.pk}/").content.decode()
    assert 'data-member="pat"' in page
    assert staff_client.post(f"/console/groups/{group.pk}/members/{plain.pk}/remove/").status_code == 302
    assert not group.user_set.exists()
    stranger = User.objects.create_user("stranger")
    assert staff_client.post(f"/console/groups/{group.pk}/members/{stranger.pk}/remove/").status_code == 404


@pytest.mark.database
def test_policy_is_validated_and_saved(staff_client: Client) -> None:
    group = _create(staff_client)
    url = f"/console/groups/{group.pk}/policy/"
    bad = staff_client.post(url, {"requests_per_minute": "-3", "daily_token_quota": "lots"})
    assert bad.status_code == 400
    assert GroupPolicy.objects.get(group=group).requests_per_minute is None
    ok = staff_client.post(url, {"requests_per_minute": "5", "daily_token_quota": "1000", "description": "x"})
    assert ok.status_code == 302
    policy = GroupPolicy.objects.get(group=group)
    assert (policy.requests_per_minute, policy.daily_token_quota, policy.tokens_per_minute) == (5, 1000, None)
    audit = AuditLog.objects.get(action="group.policy")
    assert audit.before["daily_token_quota"] is None and audit.after["daily_token_quota"] == 1000


@pytest.mark.database
def test_model_access_restricts_and_opens_again(staff_client: Client, manager: Any, plain: User) -> None:
    group = _create(staff_client)
    row = ModelRegistration.objects.create(name="base", source="default")
    url = f"/console/registrations/{row.pk}/access/"
    assert staff_client.post(url, {f"access{row.pk}-groups": [str(group.pk)]}).status_code == 302
    assert restrictions() == {"base": frozenset({group.pk})}
    assert not may_use(viewer_for_user(user_id=plain.pk), "base", restrictions())
    group.user_set.add(plain)
    assert may_use(viewer_for_user(user_id=plain.pk), "base", restrictions())
    table = staff_client.get("/console/models/table/").content.decode()
    assert "research (and admins)" in table
    assert staff_client.post(url, {f"access{row.pk}-groups": ["999999"]}).status_code == 302  # refused
    assert restrictions() == {"base": frozenset({group.pk})}
    assert staff_client.post(url, {}).status_code == 302  # none ticked: everyone
    assert restrictions() == {}
    audits = AuditLog.objects.filter(action="model.access").order_by("pk")
    assert [a.after["groups"] for a in audits] == [["research"], []]


@pytest.mark.database
def test_deleting_a_models_last_group_leaves_it_to_admins(
    staff_client: Client, manager: Any, plain: User
) -> None:
    research, ops = _create(staff_client), _create(staff_client, "ops")
    base = ModelRegistration.objects.create(name="base", source="default")
    shared = ModelRegistration.objects.create(name="shared", source="default")
    staff_client.post(f"/console/registrations/{base.pk}/access/", {f"access{base.pk}-groups": [research.pk]})
    staff_client.post(
        f"/console/registrations/{shared.pk}/access/", {f"access{shared.pk}-groups": [research.pk, ops.pk]}
    )
    research.user_set.add(plain)
    # The console says what the delete does before it is done: only the model research alone may use.
    page = staff_client.get(f"/console/groups/{research.pk}/").content.decode()
    assert "Only admins will be able to use base until you grant it to another group." in page
    assert staff_client.post(f"/console/groups/{research.pk}/delete/").status_code == 302
    assert restrictions() == {"base": frozenset(), "shared": frozenset({ops.pk})}
    for viewer in (viewer_for_user(user_id=plain.pk), viewer_for_user(user_id=None)):
        assert not may_use(viewer, "base", restrictions())  # not opened up to everyone
    assert may_use(viewer_for_user(user_id=User.objects.get(is_staff=True).pk), "base", restrictions())
    assert (
        "admins only (its groups were deleted)" in staff_client.get("/console/models/table/").content.decode()
    )
    # Opening it again is an explicit choice: saved with no group ticked.
    staff_client.post(f"/console/registrations/{base.pk}/access/", {})
    assert may_use(viewer_for_user(user_id=plain.pk), "base", restrictions())


@pytest.mark.parametrize(
    "url",
    ["/console/groups/", "/console/groups/1/", "/console/usage/"],
)
def test_only_staff_get_in(plain: User, url: str) -> None:
    client = Client()
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(plain)
    assert client.get(url).status_code == 403
    assert client.post("/console/groups/", {"name": "sneaky"}).status_code == 403
    assert not Group.objects.filter(name="sneaky").exists()
