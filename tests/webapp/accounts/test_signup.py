"""Sign-up: off by default, pending until approved, domain auto-approval, inline errors for bad input."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.accounts.conftest import ADMIN_PASSWORD
from webapp.accounts.models import AccountStatus, SignupSettings
from webapp.console.models import AuditLog

pytestmark = pytest.mark.django_db
GOOD = {
    "username": "newbie",
    "email": "newbie@example.org",
    "password1": "a-long-pass-phrase-9",
    "password2": "a-long-pass-phrase-9",
}


def test_sign_up_is_off_by_default(admin: User) -> None:
    client = Client()
    page = client.get("/signup/")
    assert page.status_code == 404 and b"Sign-up is closed" in page.content
    assert client.post("/signup/", GOOD).status_code == 404
    assert not User.objects.filter(username="newbie").exists()
    assert b"Sign up</a>" not in client.get("/login/").content


@pytest.mark.database
def test_sign_up_creates_a_pending_account_that_cannot_log_in(signup_on: SignupSettings) -> None:
    client = Client()
    assert b'href="/signup/">Sign up</a>' in client.get("/login/").content
    response = client.post("/signup/", GOOD)
    assert response.status_code == 200 and b"waiting for approval" in response.content
    user = User.objects.get(username="newbie")
    assert not user.is_active and user.email == "newbie@example.org"
    assert user.account_status.state == AccountStatus.State.PENDING
    assert AuditLog.objects.filter(action="account.signup", target="newbie").exists()

    login = client.post("/login/", {"username": "newbie", "password": GOOD["password1"]})
    assert login.status_code == 200
    assert b"waiting for approval by an administrator" in login.content
    assert "_auth_user_id" not in client.session
    # A wrong password learns nothing about the account's state.
    wrong = client.post("/login/", {"username": "newbie", "password": "not-the-password"})
    assert b"waiting for approval" not in wrong.content and b"correct username and password" in wrong.content


@pytest.mark.database
def test_approved_domain_signs_in_at_once(signup_on: SignupSettings) -> None:
    signup_on.auto_approve_domains = "example.org"
    signup_on.save()
    client = Client()
    response = client.post("/signup/", GOOD)
    assert response.status_code == 302 and response["Location"] == "/"
    user = User.objects.get(username="newbie")
    assert user.is_active and user.account_status.state == AccountStatus.State.APPROVED
    assert client.session["_auth_user_id"] == str(user.pk)


@pytest.mark.database
@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"username": "admin"}, "username", "That username is taken"),
        ({"username": "ADMIN"}, "username", "That username is taken"),
        ({"username": "x" * 151}, "username", "at most 150 characters"),
        ({"username": "bad name!"}, "username", "Enter a valid username"),
        ({"email": "not-an-email"}, "email", "Enter a valid email address"),
        ({"email": "admin@example.org"}, "email", "already exists"),
        ({"password2": "something-else-9"}, "password2", "The two passwords differ"),
        ({"password1": "password", "password2": "password"}, "password1", "too common"),
        ({"password1": "12345678901", "password2": "12345678901"}, "password1", "entirely numeric"),
        (
            {"password1": "newbie-newbie", "password2": "newbie-newbie", "username": "newbie-newbie"},
            "password1",
            "too similar",
        ),
        ({"password1": "x" * 5000, "password2": "x" * 5000}, "password1", "at most 4096 characters"),
        ({"username": ""}, "username", "This field is required"),
    ],
)
def test_bad_input_is_answered_inline(
    signup_on: SignupSettings, changes: dict[str, str], field: str, message: str
) -> None:
    response = Client().post("/signup/", {**GOOD, **changes})
    assert response.status_code == 400
    text = response.content.decode()
    errors = text[text.index(f'id="{field}-errors"') :]
    assert message in errors[: errors.index("</ul>")]
    assert User.objects.count() == 1  # only the admin


def test_signed_in_people_skip_the_form(signup_on: SignupSettings, admin_client: Client) -> None:
    assert admin_client.get("/signup/")["Location"] == "/"


def test_deactivated_account_is_told_so(admin: User) -> None:
    User.objects.create_user("gone", password="gone-password-123", is_active=False)
    response = Client().post("/login/", {"username": "gone", "password": "gone-password-123"})
    assert b"This account is deactivated" in response.content


def test_normal_login_still_works(admin: User) -> None:
    client = Client()
    response = client.post("/login/", {"username": "admin", "password": ADMIN_PASSWORD, "next": "/console/"})
    assert response.status_code == 302 and response["Location"] == "/console/"
