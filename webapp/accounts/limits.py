"""The limits a signed-in caller is admitted under: its key's, its own and each of its groups'.

The limiter checks every bucket (webapp.serving.limits), so the strictest applies; a used-up daily quota
(webapp.accounts.quotas) refuses the request before any of them is counted.
"""

from __future__ import annotations

from webapp.accounts.models import ApiKey, GroupPolicy
from webapp.accounts.quotas import quota_refusal
from webapp.accounts.selectors import api_key_limits, user_limits
from webapp.serving.limits import Bucket, Limits


def group_limits(*, user_id: int) -> list[tuple[Bucket, Limits]]:
    """One bucket per group of the user that sets any per-minute or concurrency limit."""
    checks: list[tuple[Bucket, Limits]] = []
    for policy in GroupPolicy.objects.filter(group__user__id=user_id).order_by("group_id"):
        limits = Limits(policy.requests_per_minute, policy.tokens_per_minute, policy.max_concurrent_requests)
        if limits != Limits():
            checks.append((("group", policy.group_id), limits))
    return checks


def admission_checks(*, user_id: int, api_key: ApiKey | None = None) -> list[tuple[Bucket, Limits]]:
    """The limiter buckets for this caller; raises the 429 of a used-up daily quota first (blocking)."""
    refusal = quota_refusal(user_id=user_id, api_key=api_key)
    if refusal is not None:
        raise refusal
    checks: list[tuple[Bucket, Limits]] = []
    if api_key is not None:
        checks.append((("key", api_key.pk), api_key_limits(api_key=api_key)))
    checks.append((("user", user_id), user_limits(user_id=user_id)))
    return checks + group_limits(user_id=user_id)
