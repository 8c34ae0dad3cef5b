"""Writes for getting an account: sign-up, approval by an admin, and accounts single sign-on creates."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.utils import timezone

from webapp.accounts.events import account_event
from webapp.accounts.models import AccountStatus, SignupSettings, SsoIdentity
from webapp.accounts.selectors import auto_approves, email_domain, signup_settings_get
from webapp.accounts.usernames import lookalike_of, normalize, scripts_of, skeleton
from webapp.core.errors import AuthenticationFailed, PermissionDenied


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
    """A name from the provider's claims that neither is nor passes for an existing one (accounts.usernames):
    the provider's users choose their preferred_username, so it may be a look-alike."""
    email = claims.get("email") or ""
    raw = normalize(str(claims.get("preferred_username") or email.partition("@")[0] or "user"))
    if len(scripts_of(raw)) > 1:  # mixed alphabets: the Latin name it passes for, in ASCII
        raw = skeleton(raw).encode("ascii", "ignore").decode()
    base = re.sub(r"[^\w.@+-]", "", raw)[:140] or "user"
    name, n = base, 1
    while lookalike_of(name) is not None:
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
