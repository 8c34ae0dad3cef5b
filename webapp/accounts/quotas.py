"""Daily token quotas per user, per API key and per group: checked before a request does any work.

A quota counts prompt plus generated tokens of the UTC day, from the daily usage every finished request
(API or chat) writes to the database, so it holds across replicas. A group's quota counts its members'
tokens together. The strictest applies: any quota that is used up refuses the request (429, retry at the
next UTC midnight). Per-minute limits and concurrency are the limiter's (webapp.serving.limits).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import Group
from django.db.models import F, Sum
from django.utils import timezone

from webapp.accounts.models import ApiKey, DailyUsage, GroupPolicy, UserApiLimits
from webapp.core.errors import RateLimited


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """One quota that applies to a caller, and how much of it today has used."""

    scope: str  # "user", "key" or "group"
    name: str
    used: int
    quota: int

    @property
    def exhausted(self) -> bool:
        return self.used >= self.quota


def today() -> dt.date:
    return timezone.now().astimezone(dt.UTC).date()


def seconds_to_reset(now: dt.datetime | None = None) -> float:
    now = (now or timezone.now()).astimezone(dt.UTC)
    midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    return max(1.0, (midnight - now).total_seconds())


def _used(**filters: object) -> int:
    total = DailyUsage.objects.filter(date=today(), **filters).aggregate(
        tokens=Sum(F("prompt_tokens") + F("completion_tokens"))
    )["tokens"]
    return int(total or 0)


def group_used_today(*, group_id: int) -> int:
    """Tokens the group's members used today, together (what its quota counts)."""
    return _used(user_id__in=Group.objects.filter(pk=group_id).values("user"))


def quota_lines(*, user_id: int | None, api_key: ApiKey | None = None) -> list[QuotaLine]:
    """Every quota that applies to this caller, with today's use (blocking: a few small queries)."""
    if user_id is None:
        return []
    lines: list[QuotaLine] = []
    own = UserApiLimits.objects.filter(user_id=user_id).values_list("daily_token_quota", flat=True).first()
    user_quota = own if own is not None else (settings.MOONCAKE_DAILY_TOKEN_QUOTA or None)
    if user_quota is not None:
        lines.append(QuotaLine("user", "you", _used(user_id=user_id), user_quota))
    if api_key is not None and api_key.daily_token_quota is not None:
        key_name = api_key.name or api_key.prefix
        lines.append(QuotaLine("key", key_name, _used(api_key=api_key), api_key.daily_token_quota))
    policies = GroupPolicy.objects.filter(group__user__id=user_id, daily_token_quota__isnull=False)
    for policy in policies.select_related("group"):
        assert policy.daily_token_quota is not None
        used = group_used_today(group_id=policy.group_id)
        lines.append(QuotaLine("group", policy.group.name, used, policy.daily_token_quota))
    return lines


def quota_refusal(*, user_id: int | None, api_key: ApiKey | None = None) -> RateLimited | None:
    """The 429 to answer when a quota of this caller is used up, else None (blocking)."""
    spent = [line for line in quota_lines(user_id=user_id, api_key=api_key) if line.exhausted]
    if not spent:
        return None
    line = spent[0]
    whose = {"user": "your", "key": f"API key {line.name!r}'s", "group": f"group {line.name!r}'s"}[line.scope]
    return RateLimited(
        f"Daily token quota reached: {whose} {line.quota} tokens for today are used up "
        f"({line.used} used); it resets at 00:00 UTC.",
        retry_after=seconds_to_reset(),
        code="daily_token_quota",
    )
