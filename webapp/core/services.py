"""Writes owned by the core app: the first-run administrator."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from webapp.core.selectors import users_exist


class SetupAlreadyDoneError(Exception):
    """An account exists, so first-run setup is closed."""


@transaction.atomic
def first_admin_create(*, username: str, email: str, password: str) -> User:
    """Create the first account as superuser; refuses once any account exists (two racing setups)."""
    if users_exist():
        raise SetupAlreadyDoneError("An account already exists.")
    return User.objects.create_superuser(username=username, email=email, password=password)
