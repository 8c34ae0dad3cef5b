"""API keys: hashed storage, prefix, revocation, last use, effective limits, daily usage totals."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from webapp.accounts.keys import hash_secret
from webapp.accounts.models import ApiKey
from webapp.accounts.selectors import (
    Limits,
    api_key_get_active,
    api_key_limits,
    api_key_list,
    usage_daily_all,
    usage_daily_for_key,
    usage_daily_for_user,
    user_limits,
)
from webapp.accounts.services import (
    api_key_create,
    api_key_revoke,
    api_key_set_limits,
    api_key_touch,
    usage_record,
    user_limits_set,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def user() -> User:
    return User.objects.create_user("alice", password="pw")


def test_key_is_stored_hashed_with_prefix(user: User) -> None:
    created = api_key_create(user=user, name="laptop")
    key = ApiKey.objects.get()
    assert created.secret.startswith("mc-") and len(created.secret) > 40
    assert key.secret_hash == hash_secret(created.secret) and created.secret not in key.secret_hash
    assert key.prefix == created.secret[:11] and key.created_at is not None
    assert api_key_get_active(secret=created.secret) == key
    assert api_key_get_active(secret=created.secret + "x") is None


def test_secrets_are_unique(user: User) -> None:
    secrets = {api_key_create(user=user).secret for _ in range(20)}
    assert len(secrets) == 20


def test_revoked_and_inactive_users_keys_do_not_authenticate(user: User) -> None:
    created = api_key_create(user=user)
    api_key_revoke(api_key=created.api_key)
    assert api_key_get_active(secret=created.secret) is None
    assert not ApiKey.objects.get().is_active
    other = api_key_create(user=user)
    user.is_active = False
    user.save()
    assert api_key_get_active(secret=other.secret) is None
    assert api_key_list(user=user).count() == 2
    assert api_key_list(user=user, include_revoked=False).count() == 1


def test_touch_records_last_use_at_most_once_a_minute(user: User) -> None:
    key = api_key_create(user=user).api_key
    now = timezone.now()
    api_key_touch(api_key=key, now=now)
    api_key_touch(api_key=key, now=now + dt.timedelta(seconds=10))
    assert ApiKey.objects.get().last_used_at == now
    later = now + dt.timedelta(minutes=2)
    api_key_touch(api_key=key, now=later)
    assert ApiKey.objects.get().last_used_at == later


@pytest.mark.database
def test_limits_fall_back_to_settings(user: User, settings: Any) -> None:
    settings.MOONCAKE_API_LIMITS = {"requests_per_minute": 100, "tokens_per_minute": 1000}
    key = api_key_create(user=user, tokens_per_minute=50).api_key
    assert api_key_limits(api_key=key) == Limits(100, 50, None)
    assert user_limits(user_id=user.pk) == Limits(100, 1000, None)
    user_limits_set(user=user, requests_per_minute=5, tokens_per_minute=None, max_concurrent_requests=2)
    assert user_limits(user_id=user.pk) == Limits(5, 1000, 2)
    api_key_set_limits(
        api_key=key, requests_per_minute=1, tokens_per_minute=None, max_concurrent_requests=None
    )
    assert api_key_limits(api_key=key) == Limits(1, 1000, None)


@pytest.mark.database
def test_daily_usage_totals_per_user_and_key(user: User) -> None:
    first = api_key_create(user=user).api_key
    second = api_key_create(user=user).api_key
    day = dt.date(2026, 1, 2)
    usage_record(user_id=user.pk, api_key_id=first.pk, prompt_tokens=10, completion_tokens=5, date=day)
    usage_record(
        user_id=user.pk, api_key_id=first.pk, prompt_tokens=1, completion_tokens=1, error=True, date=day
    )
    usage_record(user_id=user.pk, api_key_id=second.pk, prompt_tokens=3, completion_tokens=2, date=day)
    usage_record(
        user_id=user.pk,
        api_key_id=second.pk,
        prompt_tokens=1,
        completion_tokens=0,
        date=day + dt.timedelta(days=1),
    )
    usage_record(user_id=None, api_key_id=None, prompt_tokens=7, completion_tokens=7, date=day)
    usage_record(user_id=None, api_key_id=None, prompt_tokens=1, completion_tokens=1, date=day)
    per_user = usage_daily_for_user(user=user)
    assert [(u.date, u.requests, u.errors, u.prompt_tokens, u.completion_tokens) for u in per_user] == [
        (day + dt.timedelta(days=1), 1, 0, 1, 0),
        (day, 3, 1, 14, 8),
    ]
    assert per_user[1].total_tokens == 22
    per_key = usage_daily_for_key(api_key=first)
    assert [(u.requests, u.prompt_tokens) for u in per_key] == [(2, 11)]
    assert len(usage_daily_for_user(user=user, since=day + dt.timedelta(days=1))) == 1
    anonymous = usage_daily_all().filter(user__isnull=True)
    assert anonymous.count() == 1 and anonymous.get().requests == 2
