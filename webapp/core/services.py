"""Writes owned by the core app: the first-run administrator."""

from __future__ import annotations

import time

from django.contrib.auth.models import User
from django.db import OperationalError, transaction
from django.utils import timezone

from webapp.core.models import SetupLock
from webapp.core.selectors import users_exist

# SQLite reports a writer it cannot wait for (shared-cache databases) as "locked" at once; the racing
# setup tries again shortly and then finds the winner's account.
_LOCKED_RETRIES = 50
_LOCKED_PAUSE_S = 0.05


class SetupAlreadyDoneError(Exception):
    """An account exists, so first-run setup is closed."""


def first_admin_create(*, username: str, email: str, password: str) -> User:
    """Create the first account as superuser; of two racing setups exactly one wins."""
    for attempt in range(_LOCKED_RETRIES):
        try:
            return _first_admin_create_locked(username=username, email=email, password=password)
        except OperationalError as exc:
            if "locked" not in str(exc) or attempt == _LOCKED_RETRIES - 1:
                raise
            time.sleep(_LOCKED_PAUSE_S)
    raise AssertionError("unreachable")


@transaction.atomic
def _first_admin_create_locked(*, username: str, email: str, password: str) -> User:
    # Write before reading: a racing setup waits on this lock until we commit, then sees our account.
    # The migration makes the row, but a flushed database has none, and on PostgreSQL an UPDATE that
    # matches no row locks nothing: make sure it exists (a racing insert waits on the primary key).
    SetupLock.objects.get_or_create(pk=SetupLock.SINGLETON)
    SetupLock.objects.filter(pk=SetupLock.SINGLETON).update(last_taken=timezone.now())
    if users_exist():
        raise SetupAlreadyDoneError("An account already exists.")
    return User.objects.create_superuser(username=username, email=email, password=password)
