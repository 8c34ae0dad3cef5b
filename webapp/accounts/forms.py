"""Forms people fill in to get in: log in, sign up; and the console's sign-up settings."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import password_validators_help_texts, validate_password
from django.core.exceptions import ValidationError

from webapp.accounts.selectors import login_refusal
from webapp.accounts.usernames import new_username_problem, normalize

# A domain name as people type it: labels of letters, digits and hyphens, at least one dot.
DOMAIN_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")
MAX_DOMAINS = 200


def password_rules() -> str:
    """The configured password validators' rules in users' words ("at least 8 characters", ...)."""
    rules = password_validators_help_texts()
    return " ".join(str(rule) for rule in rules) if rules else "Any password is accepted."


class LoginForm(AuthenticationForm):
    """Django's login form, telling the owner of a pending or rejected account why they cannot log in."""

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError as exc:
            if exc.code == "invalid_login":
                refusal = self._refusal()
                if refusal:
                    raise ValidationError(refusal, code="inactive") from exc
            raise

    def _refusal(self) -> str | None:
        """Only for the right password: others learn nothing about which accounts exist or wait."""
        username, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        user = User.objects.filter(username=username).first() if username and password else None
        if user is None or user.is_active or not user.check_password(password):
            return None
        return login_refusal(user=user)


class SignUpForm(forms.Form):
    username = forms.CharField(
        max_length=150,
        help_text="Letters, digits and @ . + - _ only.",
        validators=User._meta.get_field("username").validators,
    )
    email = forms.EmailField(max_length=254)
    password1 = forms.CharField(label="Password", widget=forms.PasswordInput, max_length=4096, strip=False)
    password2 = forms.CharField(
        label="Password again", widget=forms.PasswordInput, max_length=4096, strip=False
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["password1"].help_text = password_rules()
        self.fields["username"].widget.attrs.update(autocomplete="username", autofocus=True)
        self.fields["email"].widget.attrs.update(autocomplete="email")
        for name in ("password1", "password2"):
            self.fields[name].widget.attrs.update(autocomplete="new-password")

    def clean_username(self) -> str:
        username = normalize(self.cleaned_data["username"])
        problem = new_username_problem(username)
        if problem:
            raise ValidationError(problem)
        return username

    def clean_email(self) -> str:
        email: str = self.cleaned_data["email"].strip()
        if User.objects.filter(email__iexact=email).exists():
            raise ValidationError("An account with this email already exists. Log in instead.")
        return email

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        one, two = data.get("password1"), data.get("password2")
        if one and two and one != two:
            self.add_error("password2", "The two passwords differ.")
        elif one:
            probe = User(username=data.get("username") or "", email=data.get("email") or "")
            try:
                validate_password(one, user=probe)
            except ValidationError as exc:
                self.add_error("password1", exc)
        return data


class SignupSettingsForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Let people sign up")
    auto_approve_domains = forms.CharField(
        required=False,
        max_length=20_000,
        label="Approve these email domains at once",
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text=(
            "One domain a line (example.com). Sign-ups and first SSO logins with an email there need no "
            "approval; others wait in the list below. The sign-up form does not verify email addresses, "
            "so list domains here only where that is acceptable."
        ),
    )

    def clean_auto_approve_domains(self) -> list[str]:
        raw: str = self.cleaned_data["auto_approve_domains"]
        domains = [d.strip().lower().lstrip("@") for d in re.split(r"[\s,]+", raw) if d.strip()]
        bad = [d for d in domains if not DOMAIN_RE.match(d)]
        if bad:
            raise ValidationError(f"Not a domain name: {', '.join(bad[:5])}.")
        if len(domains) > MAX_DOMAINS:
            raise ValidationError(f"At most {MAX_DOMAINS} domains.")
        return list(dict.fromkeys(domains))
