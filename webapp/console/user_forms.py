"""Console forms for people: creating users, their limits and their API keys."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import Group

from webapp.accounts.forms import password_rules
from webapp.accounts.selectors import email_taken


class UserCreateForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False, max_length=254, help_text="Optional.")
    password = forms.CharField(widget=forms.PasswordInput)
    is_staff = forms.BooleanField(required=False, label="Admin (console access)")
    groups = forms.ModelMultipleChoiceField(
        queryset=Group.objects.order_by("name"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Their limits, quota and models apply to the new user at once.",
    )

    def __init__(self, *args: Any, may_make_admins: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The rules themselves, from AUTH_PASSWORD_VALIDATORS (read per form: settings can change).
        self.fields["password"].help_text = password_rules()
        self.fields["email"].widget.attrs.update(autocomplete="off")
        if not may_make_admins:  # only owners make admins: the box is offered to no one else (and a
            self.fields["is_staff"].widget = forms.HiddenInput()  # posted one is refused by the service)
        if not Group.objects.exists():  # nothing to pick: no empty list on the page
            del self.fields["groups"]

    def clean_email(self) -> str:
        email: str = self.cleaned_data["email"].strip()
        if email and email_taken(email=email):
            raise forms.ValidationError("Another account has this email.")
        return email


class LimitsForm(forms.Form):
    requests_per_minute = forms.IntegerField(required=False, min_value=1, help_text="Empty: no limit.")
    tokens_per_minute = forms.IntegerField(required=False, min_value=1, help_text="Empty: no limit.")
    max_concurrent_requests = forms.IntegerField(required=False, min_value=1, help_text="Concurrent streams.")
    daily_token_quota = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=10**15,
        help_text="Prompt plus generated tokens per UTC day. Empty: none (for a user: the site's default).",
    )


class KeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
