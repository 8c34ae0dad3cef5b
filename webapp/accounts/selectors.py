"""Reads for API keys, limits and usage; sign-up policy, pending accounts and why a login is refused."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import QuerySet, Sum

from webapp.accounts.keys import hash_secret
from webapp.accounts.models import AccountStatus, ApiKey, DailyUsage, SignupSettings, UserApiLimits
from webapp.serving.limits import Limits


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Summed usage of one group of daily rows: a day (`key` is its ISO date), a user, a model, a source."""

    key: str
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def date(self) -> dt.date:
        """The day, for totals grouped by day."""
        return dt.date.fromisoformat(self.key)


_SUMS = {
    "requests": Sum("requests"),
    "errors": Sum("errors"),
    "prompt_tokens": Sum("prompt_tokens"),
    "completion_tokens": Sum("completion_tokens"),
}


def usage_totals(rows: QuerySet[DailyUsage], *, by: str, newest_first: bool = False) -> list[UsageTotals]:
    """`rows` summed per value of the field `by` ("date", "model", "user__username"...), in its order."""
    grouped = rows.values(by).annotate(**_SUMS).order_by(f"-{by}" if newest_first else by)
    return [
        UsageTotals(
            key=_label(item[by]),
            requests=int(item["requests"] or 0),
            errors=int(item["errors"] or 0),
            prompt_tokens=int(item["prompt_tokens"] or 0),
            completion_tokens=int(item["completion_tokens"] or 0),
        )
        for item in grouped
    ]


def _label(value: object) -> str:
    if value is None or value == "":
        return "(none)"
    return value.isoformat() if isinstance(value, dt.date) else str(value)


def api_key_get_active(*, secret: str) -> ApiKey | None:
    """The unrevoked key whose secret this is, with its user and the user's limits loaded."""
    return (
        ApiKey.objects.select_related("user")
        .filter(secret_hash=hash_secret(secret), revoked_at__isnull=True, user__is_active=True)
        .first()
    )


def api_key_list(*, user: User, include_revoked: bool = True) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.filter(user=user)
    return keys if include_revoked else keys.filter(revoked_at__isnull=True)


def default_limits() -> Limits:
    """settings.MOONCAKE_API_LIMITS: the limits of anonymous callers and of keys with none set."""
    raw: dict[str, Any] = getattr(settings, "MOONCAKE_API_LIMITS", {}) or {}
    return Limits(
        requests_per_minute=raw.get("requests_per_minute"),
        tokens_per_minute=raw.get("tokens_per_minute"),
        max_concurrent_requests=raw.get("max_concurrent_requests"),
    )


def _merge(own: Limits, fallback: Limits) -> Limits:
    return Limits(
        requests_per_minute=own.requests_per_minute
        if own.requests_per_minute is not None
        else fallback.requests_per_minute,
        tokens_per_minute=own.tokens_per_minute
        if own.tokens_per_minute is not None
        else fallback.tokens_per_minute,
        max_concurrent_requests=own.max_concurrent_requests
        if own.max_concurrent_requests is not None
        else fallback.max_concurrent_requests,
    )


def user_limits(*, user_id: int) -> Limits:
    """The user's own limits, falling back to the defaults."""
    row = UserApiLimits.objects.filter(user_id=user_id).first()
    own = (
        Limits(row.requests_per_minute, row.tokens_per_minute, row.max_concurrent_requests)
        if row
        else Limits()
    )
    return _merge(own, default_limits())


def api_key_limits(*, api_key: ApiKey) -> Limits:
    """The key's own limits, falling back to the defaults (the user's limits apply separately)."""
    own = Limits(api_key.requests_per_minute, api_key.tokens_per_minute, api_key.max_concurrent_requests)
    return _merge(own, default_limits())


def usage_daily_for_user(*, user: User, since: dt.date | None = None) -> list[UsageTotals]:
    """Per-day totals over all of a user's keys, newest first."""
    rows = DailyUsage.objects.filter(user=user)
    return usage_totals(rows.filter(date__gte=since) if since else rows, by="date", newest_first=True)


def usage_daily_for_key(*, api_key: ApiKey, since: dt.date | None = None) -> list[UsageTotals]:
    rows = DailyUsage.objects.filter(api_key=api_key)
    return usage_totals(rows.filter(date__gte=since) if since else rows, by="date", newest_first=True)


def usage_daily_all(*, since: dt.date | None = None) -> QuerySet[DailyUsage]:
    """Every (day, user, key) row, for the console's usage table."""
    rows = DailyUsage.objects.select_related("user", "api_key")
    return rows.filter(date__gte=since) if since else rows


# ---- sign-up, approval and login refusals

PENDING_MESSAGE = "Your account is waiting for approval by an administrator. Try again once it is approved."
REJECTED_MESSAGE = "Your request for an account was declined. Ask an administrator if this is a mistake."
INACTIVE_MESSAGE = "This account is deactivated. Ask an administrator to reactivate it."


def signup_settings_get() -> SignupSettings:
    """The sign-up policy; the defaults (sign-up off, no domains) until an admin saves the page."""
    return SignupSettings.objects.filter(pk=1).first() or SignupSettings(pk=1)


def email_taken(*, email: str, except_user: User | None = None) -> bool:
    """Whether another account has this email, in any case (sign-up refuses a second account for one)."""
    others = User.objects.filter(email__iexact=email.strip())
    if except_user is not None:
        others = others.exclude(pk=except_user.pk)
    return bool(email.strip()) and others.exists()


def email_domain(email: str) -> str:
    return email.rpartition("@")[2].strip().lower() if "@" in email else ""


def auto_approves(*, email: str) -> bool:
    """Whether an account asked for with this email is approved without waiting for an admin."""
    domain = email_domain(email)
    return bool(domain) and domain in signup_settings_get().domains


def pending_accounts() -> QuerySet[AccountStatus]:
    return AccountStatus.objects.select_related("user").filter(
        state=AccountStatus.State.PENDING, user__is_active=False
    )


def pending_account_get(*, pk: int) -> AccountStatus | None:
    """A pending request by its user id (None when it is not pending, so it cannot be decided twice)."""
    return pending_accounts().filter(user_id=pk).first()


def login_refusal(*, user: User) -> str | None:
    """What to tell the owner of an inactive account who gave the right password; None if it may log in."""
    if user.is_active:
        return None
    status = AccountStatus.objects.filter(user=user).first()
    if status is not None and status.state == AccountStatus.State.PENDING:
        return PENDING_MESSAGE
    if status is not None and status.state == AccountStatus.State.REJECTED:
        return REJECTED_MESSAGE
    return INACTIVE_MESSAGE
