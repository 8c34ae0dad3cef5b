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


def toggle_refusal(*, actor: User, user: User, field: str) -> str | None:
    """Why `actor` may not flip `user`'s "active" or "staff" flag now, or None when they may.

    An admin who deactivated or demoted themselves would lose the console at once, with nobody left to
    undo it. The services refuse with this reason and the user page hides the buttons by the same rule,
    so the page never offers what the server refuses.
    """
    if actor.pk != user.pk:
        return None
    if field == "active" and user.is_active:
        return "you cannot deactivate your own account"
    if field == "staff" and user.is_staff:
        return "you cannot demote your own account"
    return None


def _refuse(*, actor: User, user: User, field: str) -> None:
    reason = toggle_refusal(actor=actor, user=user, field=field)
    if reason:
        raise UserActionError(reason)


def user_set_active(*, actor: User, user: User, active: bool) -> User:
    if not active:
        _refuse(actor=actor, user=user, field="active")
    user.is_active = active
    user.save(update_fields=["is_active"])
    return user


def user_set_staff(*, actor: User, user: User, staff: bool) -> User:
    if not staff:
        _refuse(actor=actor, user=user, field="staff")
    user.is_staff = staff
    user.save(update_fields=["is_staff"])
    return user


def user_reset_password(*, user: User) -> str:
    """Set a new random password and return it (shown to the admin once)."""
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.save(update_fields=["password"])
    return password
