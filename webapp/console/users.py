"""User administration: create, (de)activate, promote, reset passwords. Keys and limits live in accounts.

Three roles: a user; an admin (staff: the console); an owner (superuser: the setup account, and those an
owner makes owners). An admin who is not an owner may act on users only: another admin's or an owner's
password, keys, limits and rights are the owners' to change, and only owners make admins or owners.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from webapp.accounts.selectors import email_taken
from webapp.accounts.usernames import new_username_problem, normalize


class UserActionError(ValueError):
    """The change is refused (for instance an admin locking themselves out)."""


def user_create(
    *,
    actor: User,
    username: str,
    password: str,
    is_staff: bool = False,
    email: str = "",
    groups: Iterable[Group] = (),
) -> User:
    """A new account, with its email and groups; an admin account only when an owner makes it (the same
    rule as promoting one), and so, as console.groups has it, only an owner puts a new admin in groups."""
    if is_staff and not actor.is_superuser:
        raise UserActionError("only an owner can make admins")
    username, email, groups = normalize(username), email.strip(), list(groups)
    if User.objects.filter(username__iexact=username).exists():
        raise UserActionError(f"a user named {username!r} already exists")
    problem = new_username_problem(username)
    if problem:
        raise UserActionError(problem)
    if email_taken(email=email):
        raise UserActionError(f"another account has the email {email!r}")
    user = User(username=username, email=email, is_staff=is_staff)
    # console.groups.member_refusal's rule (that module imports this one): the role's "limits" action.
    if groups and action_refusal(actor=actor, user=user, action="limits"):
        raise UserActionError(f"only an owner can choose the groups of another {role_of(user)}")
    validate_password(password, user)
    user.set_password(password)
    with transaction.atomic():
        user.save()
        user.groups.set(groups)
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


# What an admin can do to an account, each checked by action_refusal.
ACTIONS = ("active", "staff", "owner", "password", "keys", "limits")


def role_of(user: User) -> str:
    return "owner" if user.is_superuser else "admin" if user.is_staff else "user"


def action_refusal(*, actor: User, user: User, action: str) -> str | None:
    """Why `actor` may not do `action` (one of ACTIONS) to `user`'s account, or None when they may. The
    views refuse with it and the user page hides what it refuses."""
    if action == "owner":
        if not actor.is_superuser:
            return "only an owner can make or remove owners"
        if actor.pk == user.pk:
            return "you cannot remove your own owner role (another owner can)"
        return None
    if not actor.is_superuser:
        if action == "staff" and not user.is_staff:
            return "only an owner can make admins"
        if actor.pk != user.pk and (user.is_staff or user.is_superuser):
            return f"only an owner can change another {role_of(user)}'s account"
    if action in ("active", "staff"):
        return toggle_refusal(actor=actor, user=user, field=action)
    return None


def ensure_allowed(*, actor: User, user: User, action: str) -> None:
    reason = action_refusal(actor=actor, user=user, action=action)
    if reason:
        raise UserActionError(reason)


def _refuse(*, actor: User, user: User, field: str) -> None:
    ensure_allowed(actor=actor, user=user, action=field)


def user_set_active(*, actor: User, user: User, active: bool) -> User:
    _refuse(actor=actor, user=user, field="active")
    user.is_active = active
    user.save(update_fields=["is_active"])
    return user


def user_set_staff(*, actor: User, user: User, staff: bool) -> User:
    _refuse(actor=actor, user=user, field="staff")
    if not staff and user.is_superuser:
        raise UserActionError("remove the owner role first: an owner is always an admin")
    user.is_staff = staff
    user.save(update_fields=["is_staff"])
    return user


def user_set_owner(*, actor: User, user: User, owner: bool) -> User:
    _refuse(actor=actor, user=user, field="owner")
    user.is_superuser = owner
    user.is_staff = user.is_staff or owner  # an owner runs the console too
    user.save(update_fields=["is_superuser", "is_staff"])
    return user


def user_reset_password(*, user: User) -> str:
    """Set a new random password and return it (shown to the admin once)."""
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.save(update_fields=["password"])
    return password
