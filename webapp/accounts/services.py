"""Writes for API keys, limits and usage (keyword-only, HackSoft style); sign-up and SSO: accounts.signup."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from webapp.accounts.keys import display_prefix, generate_secret, hash_secret
from webapp.accounts.models import (
    ApiKey,
    DailyUsage,
    UserApiLimits,
)

# Writing last_used_at on every request would turn each API call into a write; a minute is precise enough.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class CreatedKey:
    api_key: ApiKey
    secret: str  # shown once; only its hash is stored


def api_key_create(
    *,
    user: User,
    name: str = "",
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    max_concurrent_requests: int | None = None,
) -> CreatedKey:
    secret = generate_secret()
    api_key = ApiKey.objects.create(
        user=user,
        name=name,
        prefix=display_prefix(secret),
        secret_hash=hash_secret(secret),
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        max_concurrent_requests=max_concurrent_requests,
    )
    return CreatedKey(api_key=api_key, secret=secret)


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


# A key's or a user's limits, as the console edits them.
LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests", "daily_token_quota")


def api_key_set_limits(
    *,
    api_key: ApiKey,
    requests_per_minute: int | None,
    tokens_per_minute: int | None,
    max_concurrent_requests: int | None,
    daily_token_quota: int | None = None,
) -> ApiKey:
    api_key.requests_per_minute = requests_per_minute
    api_key.tokens_per_minute = tokens_per_minute
    api_key.max_concurrent_requests = max_concurrent_requests
    api_key.daily_token_quota = daily_token_quota
    api_key.save(update_fields=[*LIMIT_FIELDS])
    return api_key


def user_limits_set(
    *,
    user: User,
    requests_per_minute: int | None,
    tokens_per_minute: int | None,
    max_concurrent_requests: int | None,
    daily_token_quota: int | None = None,
) -> UserApiLimits:
    limits, _ = UserApiLimits.objects.update_or_create(
        user=user,
        defaults={
            "requests_per_minute": requests_per_minute,
            "tokens_per_minute": tokens_per_minute,
            "max_concurrent_requests": max_concurrent_requests,
            "daily_token_quota": daily_token_quota,
        },
    )
    return limits


def api_key_touch(*, api_key: ApiKey, now: dt.datetime | None = None) -> None:
    """Record use, at most once per LAST_USED_RESOLUTION."""
    now = now or timezone.now()
    if api_key.last_used_at is not None and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
    api_key.last_used_at = now


def usage_record(
    *,
    user_id: int | None,
    api_key_id: int | None,
    prompt_tokens: int,
    completion_tokens: int,
    error: bool = False,
    date: dt.date | None = None,
    model: str = "",
    source: str = "api",
) -> None:
    """Add one request to the day's totals for its user, key, model and source."""
    day = date or timezone.now().astimezone(dt.UTC).date()
    row = _UsageRow(day, user_id, api_key_id, model[:200], source)
    try:
        _usage_add(row, prompt_tokens, completion_tokens, error)
    except IntegrityError:
        # Another process created the day's row between our read and insert: it exists now.
        _usage_add(row, prompt_tokens, completion_tokens, error)


@dataclass(frozen=True, slots=True)
class _UsageRow:
    day: dt.date
    user_id: int | None
    api_key_id: int | None
    model: str
    source: str


def _usage_add(key: _UsageRow, prompt: int, completion: int, error: bool) -> None:
    user_id, api_key_id = key.user_id, key.api_key_id
    with transaction.atomic():
        # filter() then create(): get_or_create cannot look up a NULL user (anonymous use) by equality.
        rows = DailyUsage.objects.select_for_update().filter(
            date=key.day,
            user__isnull=user_id is None,
            api_key__isnull=api_key_id is None,
            model=key.model,
            source=key.source,
        )
        if user_id is not None:
            rows = rows.filter(user_id=user_id)
        if api_key_id is not None:
            rows = rows.filter(api_key_id=api_key_id)
        row = rows.first() or DailyUsage.objects.create(
            date=key.day, user_id=user_id, api_key_id=api_key_id, model=key.model, source=key.source
        )
        DailyUsage.objects.filter(pk=row.pk).update(
            requests=F("requests") + 1,
            errors=F("errors") + (1 if error else 0),
            prompt_tokens=F("prompt_tokens") + prompt,
            completion_tokens=F("completion_tokens") + completion,
        )
