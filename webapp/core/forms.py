"""The first-run form: the administrator's name, email and password (Django's password rules apply)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import password_validation


class FirstAdminForm(forms.Form):
    username = forms.CharField(
        max_length=150, initial="admin", widget=forms.TextInput(attrs={"autofocus": True})
    )
    email = forms.EmailField(required=False)
    password1 = forms.CharField(label="Password", strip=False, widget=forms.PasswordInput)
    password2 = forms.CharField(label="Password (again)", strip=False, widget=forms.PasswordInput)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        password1, password2 = cleaned.get("password1"), cleaned.get("password2")
        if password1 and password2 and password1 != password2:
            self.add_error("password2", "The two passwords differ.")
        elif password1:
            try:
                password_validation.validate_password(password1)
            except forms.ValidationError as exc:
                self.add_error("password1", exc)
        return cleaned
