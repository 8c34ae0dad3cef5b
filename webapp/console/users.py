"""User administration: create, (de)activate, promote, reset passwords. Keys and limits live in accounts."""

from __future__ import annotations

import secrets

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password


class UserActionError(ValueError):
    """The change is refused (for instance an admin locking themselves out)."""


def user_create(*, username: str, password: str, is_staff: bool = False) -> User:
    if User.objects.filter(username__iexact=username).exists():
        raise UserActionError(f"a user named {username!r} already exists")
    user = User(username=username, is_staff=is_staff)
    validate_password(password, user)
    user.set_password(password)
    user.save()
    return user


def _not_self(*, actor: User, user: User, what: str) -> None:
    if actor.pk == user.pk:
        raise UserActionError(f"you cannot {what} your own account")


def user_set_active(*, actor: User, user: User, active: bool) -> User:
    if not active:
        _not_self(actor=actor, user=user, what="deactivate")
    user.is_active = active
    user.save(update_fields=["is_active"])
    return user


def user_set_staff(*, actor: User, user: User, staff: bool) -> User:
    if not staff:
        _not_self(actor=actor, user=user, what="demote")
    user.is_staff = staff
    user.save(update_fields=["is_staff"])
    return user


def user_reset_password(*, user: User) -> str:
    """Set a new random password and return it (shown to the admin once)."""
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.save(update_fields=["password"])
    return password
