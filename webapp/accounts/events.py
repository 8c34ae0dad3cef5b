"""What accounts tells the rest of the site: a signal per change worth an audit entry.

The console records them in its audit log (webapp.console.apps connects the receiver), so accounts never
imports the console, which builds on accounts.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.dispatch import Signal

# Sent with actor, action, target, before and after (the audit log's fields).
account_changed = Signal()


def account_event(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: str,
    target: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    account_changed.send(
        sender=account_event, actor=actor, action=action, target=target, before=before, after=after
    )
