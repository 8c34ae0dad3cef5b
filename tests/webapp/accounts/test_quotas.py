"""Daily token quotas per user, per key and per group, and group limits: the strictest applies, through
the API and the chat, and a used-up quota is a 429 that says whose quota and when it resets."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.models import ApiKey, GroupPolicy, UserApiLimits
from webapp.accounts.quotas import quota_lines, seconds_to_reset
from webapp.accounts.services import api_key_create, usage_record
from webapp.core.errors import RateLimited
from webapp.serving.runtime import get_runtime

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(autouse=True)
def served(settings: Any) -> Any:
    settings.MOONCAKE_API_AUTH = "required"
    manager = FakeModelManager.with_engine(FakeEngine(model_name="m"), aliases=["default"])
    get_runtime().install_manager(manager)
    get_runtime().limiter.reset()
    yield manager
    get_runtime().install_manager(None)


def _key(user: User, **fields: Any) -> str:
    created = api_key_create(user=user, name=f"k-{user.username}")
    if fields:
        ApiKey.objects.filter(pk=created.api_key.pk).update(**fields)
    return created.secret


async def _chat(secret: str) -> Any:
    return await post_json(AsyncClient(), "/v1/chat/completions", BODY, Authorization=f"Bearer {secret}")


def _spend(user: User, tokens: int, api_key: ApiKey | None = None) -> None:
    usage_record(
        user_id=user.pk, api_key_id=api_key.pk if api_key else None, prompt_tokens=tokens, completion_tokens=0
    )


async def test_a_users_quota_refuses_once_used_and_says_when_it_resets() -> None:
    user = await sync_to_async(User.objects.create_user)("quota-user")
    secret = await sync_to_async(_key)(user)
    await sync_to_async(UserApiLimits.objects.create)(user=user, daily_token_quota=100)
    assert (await _chat(secret)).status_code == 200
    await sync_to_async(_spend)(user, 100)
    response = await _chat(secret)
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "daily_token_quota" and error["type"] == "rate_limit_error"
    assert "your 100 tokens" in error["message"] and "00:00 UTC" in error["message"]
    assert 0 < int(response["Retry-After"]) <= 86400


async def test_the_setting_is_the_default_quota_and_a_users_own_wins(settings: Any) -> None:
    settings.MOONCAKE_DAILY_TOKEN_QUOTA = 10
    user = await sync_to_async(User.objects.create_user)("defaulted")
    secret = await sync_to_async(_key)(user)
    await sync_to_async(_spend)(user, 10)
    assert (await _chat(secret)).status_code == 429
    await sync_to_async(UserApiLimits.objects.create)(user=user, daily_token_quota=1000)
    assert (await _chat(secret)).status_code == 200


async def test_a_keys_quota_counts_that_key_only() -> None:
    user = await sync_to_async(User.objects.create_user)("two-keys")
    capped = await sync_to_async(_key)(user, daily_token_quota=50)
    other = await sync_to_async(_key)(user)
    key = await sync_to_async(ApiKey.objects.filter(daily_token_quota=50).get)()
    await sync_to_async(_spend)(user, 50, key)
    response = await _chat(capped)
    assert response.status_code == 429 and "API key" in response.json()["error"]["message"]
    assert (await _chat(other)).status_code == 200


async def test_a_groups_quota_counts_its_members_together() -> None:
    team = await sync_to_async(Group.objects.create)(name="team")
    await sync_to_async(GroupPolicy.objects.create)(group=team, daily_token_quota=100)
    alice = await sync_to_async(User.objects.create_user)("alice")
    bob = await sync_to_async(User.objects.create_user)("bob")
    carol = await sync_to_async(User.objects.create_user)("carol")  # not in the team
    for member in (alice, bob):
        await sync_to_async(member.groups.add)(team)
    keys = {u.username: await sync_to_async(_key)(u) for u in (alice, bob, carol)}
    await sync_to_async(_spend)(alice, 60)
    assert (await _chat(keys["bob"])).status_code == 200
    await sync_to_async(_spend)(bob, 40)
    for name in ("alice", "bob"):
        response = await _chat(keys[name])
        assert response.status_code == 429 and "group 'team'" in response.json()["error"]["message"]
    assert (await _chat(keys["carol"])).status_code == 200


async def test_group_limits_hold_beside_each_users_own() -> None:
    team = await sync_to_async(Group.objects.create)(name="rpm-team")
    await sync_to_async(GroupPolicy.objects.create)(group=team, requests_per_minute=1)
    users = [await sync_to_async(User.objects.create_user)(f"m{i}") for i in range(2)]
    for user in users:
        await sync_to_async(user.groups.add)(team)
    secrets = [await sync_to_async(_key)(user) for user in users]
    assert (await _chat(secrets[0])).status_code == 200
    response = await _chat(secrets[1])  # a different user and key: the group's bucket is shared
    assert response.status_code == 429 and response.json()["error"]["code"] == "requests_per_minute"


async def test_chat_sends_meet_the_same_quota() -> None:
    from webapp.chat.admission import admit_send
    from webapp.chat.models import Conversation

    user = await sync_to_async(User.objects.create_user)("chatter")
    await sync_to_async(UserApiLimits.objects.create)(user=user, daily_token_quota=5)
    await sync_to_async(_spend)(user, 5)
    conversation = await sync_to_async(Conversation.objects.create)(user=user)
    with pytest.raises(RateLimited, match="Daily token quota reached"):
        await admit_send(conversation, 60, [{"role": "user", "content": "hi"}])
    from webapp.accounts.models import RequestLog

    row = await sync_to_async(RequestLog.objects.get)(user=user)
    assert (row.source, row.status_code) == ("chat", 429)


def test_quota_lines_list_every_quota_that_applies() -> None:
    user = User.objects.create_user("lines")
    team = Group.objects.create(name="lines-team")
    GroupPolicy.objects.create(group=team, daily_token_quota=300)
    user.groups.add(team)
    UserApiLimits.objects.create(user=user, daily_token_quota=200)
    _spend(user, 30)
    lines = {(line.scope, line.name): (line.used, line.quota) for line in quota_lines(user_id=user.pk)}
    assert lines == {("user", "you"): (30, 200), ("group", "lines-team"): (30, 300)}
    assert 0 < seconds_to_reset() <= 86400
