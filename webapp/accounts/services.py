"""Writes for API keys, limits and usage; sign-up, approval, SSO accounts (keyword-only, HackSoft style)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from webapp.accounts.events import account_event
from webapp.accounts.keys import display_prefix, generate_secret, hash_secret
from webapp.accounts.models import (
    AccountStatus,
    ApiKey,
    DailyUsage,
    SignupSettings,
    SsoIdentity,
    UserApiLimits,
)
from webapp.accounts.selectors import auto_approves, email_domain, signup_settings_get
from webapp.core.errors import AuthenticationFailed, PermissionDenied

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


# ---- sign-up, approval, single sign-on


class SsoRefused(AuthenticationFailed):
    """A single sign-on that must not log anyone in; the message is shown on the login page."""


def signup_settings_set(*, actor: User, enabled: bool, domains: list[str]) -> SignupSettings:
    row = signup_settings_get()
    before = {"enabled": row.enabled, "auto_approve_domains": row.domains}
    row.enabled = enabled
    row.auto_approve_domains = "\n".join(dict.fromkeys(d.lower() for d in domains))
    row.save()
    account_event(
        actor=actor, action="signup.settings", target="sign-up",
        before=before, after={"enabled": row.enabled, "auto_approve_domains": row.domains},
    )  # fmt: skip
    return row


def _request_account(*, user: User, source: str, email: str) -> AccountStatus:
    """Record how the account came to be: approved at once for an auto-approved domain, else pending."""
    approved = auto_approves(email=email)
    user.is_active = approved
    user.save(update_fields=["is_active"])
    state = AccountStatus.State.APPROVED if approved else AccountStatus.State.PENDING
    return AccountStatus.objects.create(
        user=user, source=source, state=state, decided_at=timezone.now() if approved else None
    )


@transaction.atomic
def user_sign_up(*, username: str, email: str, password: str) -> tuple[User, AccountStatus]:
    """A new account from the sign-up form (which has validated every field)."""
    if not signup_settings_get().enabled:
        raise PermissionDenied("Sign-up is turned off.")
    user = User.objects.create_user(username, email=email, password=password)
    status = _request_account(user=user, source=AccountStatus.Source.SIGNUP, email=email)
    account_event(
        actor=None, action="account.signup", target=username, after={"email": email, "state": status.state}
    )
    return user, status


def _decide(*, actor: User, status: AccountStatus, approve: bool) -> AccountStatus:
    status.state = AccountStatus.State.APPROVED if approve else AccountStatus.State.REJECTED
    status.decided_at = timezone.now()
    status.decided_by = actor
    status.save(update_fields=["state", "decided_at", "decided_by"])
    status.user.is_active = approve
    status.user.save(update_fields=["is_active"])
    account_event(
        actor=actor, action="account.approve" if approve else "account.reject", target=status.user.username,
        before={"state": AccountStatus.State.PENDING}, after={"state": status.state, "source": status.source},
    )  # fmt: skip
    return status


def account_approve(*, actor: User, status: AccountStatus) -> AccountStatus:
    return _decide(actor=actor, status=status, approve=True)


def account_reject(*, actor: User, status: AccountStatus) -> AccountStatus:
    """The account stays, inactive, so its owner is told it was declined and SSO does not re-create it."""
    return _decide(actor=actor, status=status, approve=False)


def groups_for_claim(values: list[str]) -> list[Group]:
    """The groups an identity provider's group claim grants: django.contrib.auth Groups of the same names."""
    names = [v.strip()[:150] for v in values if isinstance(v, str) and v.strip()]
    return [Group.objects.get_or_create(name=name)[0] for name in dict.fromkeys(names)]


def _free_username(claims: dict[str, Any]) -> str:
    email = claims.get("email") or ""
    raw = str(claims.get("preferred_username") or email.partition("@")[0] or "user")
    base = re.sub(r"[^\w.@+-]", "", raw)[:140] or "user"
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


@transaction.atomic
def sso_user_sign_in(
    *, issuer: str, claims: dict[str, Any], allowed_domains: list[str], groups_claim: str
) -> User:
    """The user for checked ID token claims: linked by (issuer, sub); created (pending or approved) if new."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise SsoRefused("The identity provider sent no subject (sub) for this account.")
    email = str(claims.get("email") or "")
    if allowed_domains:
        if not email or claims.get("email_verified") is False:
            raise SsoRefused(
                "Your identity provider did not confirm an email address, which this server requires."
            )
        if email_domain(email) not in allowed_domains:
            raise SsoRefused(f"Accounts from {email_domain(email)} may not sign in to this server.")
    identity = SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    if identity is None:
        user = User.objects.create_user(_free_username(claims), email=email)
        user.first_name = str(claims.get("given_name") or "")[:150]
        user.last_name = str(claims.get("family_name") or "")[:150]
        user.save(update_fields=["first_name", "last_name"])
        verified_email = email if claims.get("email_verified") is not False else ""
        status = _request_account(user=user, source=AccountStatus.Source.SSO, email=verified_email)
        identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
        account_event(
            actor=None, action="account.sso_create", target=user.username,
            after={"issuer": issuer, "email": email, "state": status.state},
        )  # fmt: skip
    identity.last_login_at = timezone.now()
    if groups_claim:
        _sync_groups(identity=identity, values=claims.get(groups_claim))
    identity.save(update_fields=["last_login_at", "groups"])
    return identity.user


def _sync_groups(*, identity: SsoIdentity, values: object) -> None:
    """Give the claim's groups and take back those an earlier login's claim gave that it no longer lists."""
    listed = [values] if isinstance(values, str) else values if isinstance(values, list) else []
    granted = groups_for_claim([v for v in listed if isinstance(v, str)])
    names = [g.name for g in granted]
    dropped = [name for name in identity.groups if name not in names]
    user = identity.user
    if dropped:
        user.groups.remove(*Group.objects.filter(name__in=dropped))
    user.groups.add(*granted)
    identity.groups = names
