"""Input validation for Settings, Account: the shape of what was typed. Whether the current password is
right, and whether another account has the email, the services decide (webapp.accounts.self_service):
checking a password costs a hash, so it is done once."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError

from webapp.accounts.forms import password_rules
from webapp.accounts.self_service import MAX_EMAIL_CHARS

# As long as a password field on the sign-up form may be; hashing a longer one is work for nothing.
MAX_PASSWORD_CHARS = 4096


def _password(label: str, autocomplete: str, required: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        max_length=MAX_PASSWORD_CHARS,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": autocomplete}),
        error_messages={"required": required},
    )


class EmailForm(forms.Form):
    email = forms.EmailField(
        max_length=MAX_EMAIL_CHARS,
        error_messages={"required": "Enter your email address.", "invalid": "Enter a valid email address."},
    )
    current_password = _password("Current password", "current-password", "Enter your current password.")


class PasswordForm(forms.Form):
    current_password = _password("Current password", "current-password", "Enter your current password.")
    new_password1 = _password("New password", "new-password", "Enter a new password.")
    new_password2 = _password("New password again", "new-password", "Enter the new password again.")

    def __init__(self, *args: Any, user: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user  # the validators compare the password with the account's name and email
        self.fields["new_password1"].help_text = password_rules()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        one, two = data.get("new_password1"), data.get("new_password2")
        if one and two and one != two:
            self.add_error("new_password2", "The two new passwords differ.")
        elif one:
            try:
                validate_password(one, user=self.user)
            except ValidationError as exc:
                self.add_error("new_password1", exc)
        return data
