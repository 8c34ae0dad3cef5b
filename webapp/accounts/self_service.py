"""Changes people make to their own account (Settings, Account): their email and their password.

Each asks for the current password, so a session left open (or taken) cannot change them. A new password
meets AUTH_PASSWORD_VALIDATORS; it also ends the account's other sessions, as Django's session hash no
longer matches theirs (the caller keeps its own with update_session_auth_hash). An account that signs in
only through single sign-on has no password here to give or change.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from webapp.accounts.events import account_event
from webapp.accounts.selectors import email_taken
from webapp.core.errors import InvalidRequest

MAX_EMAIL_CHARS = 254  # Django's User.email
SSO_ONLY = "You sign in through single sign-on: your provider holds your password."


def _check_current(user: User, current_password: str) -> None:
    if not user.has_usable_password():
        raise InvalidRequest(SSO_ONLY, param="current_password", code="no_password")
    if not current_password or not user.check_password(current_password):
        raise InvalidRequest("Your current password is not right.", param="current_password", code="invalid")


def email_change(*, user: User, email: str, current_password: str) -> User:
    """Set the account's email; refused when another account has it (sign-up refuses that too)."""
    email = email.strip()
    try:
        validate_email(email)
    except ValidationError as exc:
        raise InvalidRequest("Enter a valid email address.", param="email", code="invalid") from exc
    if len(email) > MAX_EMAIL_CHARS:
        raise InvalidRequest(f"The email is longer than {MAX_EMAIL_CHARS} characters.", param="email")
    _check_current(user, current_password)
    if email_taken(email=email, except_user=user):
        raise InvalidRequest("Another account has this email.", param="email", code="taken")
    before = user.email
    with transaction.atomic():
        user.email = email
        user.save(update_fields=["email"])
        account_event(
            actor=user,
            action="account.email",
            target=user.username,
            before={"email": before},
            after={"email": email},
        )
    return user


def password_change(*, user: User, current_password: str, new_password: str) -> User:
    """Set a new password: the current one first, then the validators' rules (each reason by the field)."""
    _check_current(user, current_password)
    try:
        validate_password(new_password, user)
    except ValidationError as exc:
        raise InvalidRequest(" ".join(exc.messages), param="new_password1", code="invalid") from exc
    with transaction.atomic():
        user.set_password(new_password)
        user.save(update_fields=["password"])
        account_event(actor=user, action="account.password", target=user.username)
    return user
