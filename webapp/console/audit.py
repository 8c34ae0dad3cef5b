"""The audit trail: every console change records who, when, and the state before and after."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User

from webapp.console.models import AuditLog


def audit_record(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: str,
    target: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditLog:
    user = actor if isinstance(actor, User) else None
    return AuditLog.objects.create(actor=user, action=action, target=target, before=before, after=after)


def record_account_event(sender: object, **event: Any) -> None:
    """webapp.accounts.events.account_changed, kept in the audit log."""
    event.pop("signal", None)
    audit_record(**event)
