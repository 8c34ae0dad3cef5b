"""The settings page shows a user their own usage and every quota that applies ("used today / quota"),
and offers as a default only the models the user may use."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.models import GroupPolicy, UserApiLimits
from webapp.accounts.services import usage_record
from webapp.core.models import ModelRegistration
from webapp.serving.model_access import restrictions_changed
from webapp.serving.runtime import get_runtime

pytestmark = [pytest.mark.database, pytest.mark.django_db]


@pytest.fixture
def models() -> Any:
    manager = FakeModelManager.with_engine(FakeEngine(model_name="open"), aliases=["default"])
    manager.register("secret", None)
    manager.attach("secret", FakeEngine(model_name="secret"))
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().install_manager(None)


def test_usage_and_quotas_are_shown(models: Any) -> None:
    user = User.objects.create_user("quota-reader", password="pw-quota-reader-1")
    team = Group.objects.create(name="team")
    GroupPolicy.objects.create(group=team, daily_token_quota=500)
    user.groups.add(team)
    UserApiLimits.objects.create(user=user, daily_token_quota=100)
    usage_record(user_id=user.pk, api_key_id=None, prompt_tokens=120, completion_tokens=5, source="chat")
    client = Client()
    client.force_login(user)
    page = client.get("/settings/").content.decode()
    assert "Your daily quota:</strong> 125 of 100 tokens used today" in page
    assert "used up until 00:00 UTC" in page
    assert "Group team:</strong> 125 of 500 tokens used today" in page
    assert "<td>120</td><td>5</td>" in page


def test_restricted_models_are_offered_only_to_their_groups(models: Any) -> None:
    lab = Group.objects.create(name="lab")
    secret = ModelRegistration.objects.create(name="secret", source="default", restricted=True)
    secret.allowed_groups.add(lab)
    restrictions_changed()
    outsider = User.objects.create_user("outsider")
    member = User.objects.create_user("member")
    member.groups.add(lab)
    for user, sees in ((outsider, False), (member, True)):
        client = Client()
        client.force_login(user)
        page = client.get("/settings/").content.decode()
        assert ('value="secret"' in page) is sees
        assert 'value="open"' in page


def test_a_model_the_user_may_not_use_cannot_become_their_default(models: Any) -> None:
    lab = Group.objects.create(name="lab")
    secret = ModelRegistration.objects.create(name="secret", source="default", restricted=True)
    secret.allowed_groups.add(lab)
    restrictions_changed()
    user = User.objects.create_user("picky")
    client = Client()
    client.force_login(user)
    response = client.post("/settings/defaults/", {"model": "secret"})
    assert response.status_code == 400 and "Unknown model" in response.content.decode()
