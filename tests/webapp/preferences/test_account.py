"""Settings, Account: changing one's own email and password. The current password is asked each time, the
validators apply, every refusal comes back by its field (a 400, never a 500), and a new password logs out
the account's other sessions while this one stays in."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.accounts import self_service
from webapp.console.models import AuditLog
from webapp.core.errors import InvalidRequest

pytestmark = [pytest.mark.django_db, pytest.mark.database]
OLD, NEW = "old-password-42", "a-fresh-passphrase-77"
PASSWORD_URL, EMAIL_URL = "/settings/account/password/", "/settings/account/email/"


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", email="alice@example.com", password=OLD)


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def change(client: Client, current: str = OLD, one: str = NEW, two: str | None = None) -> Any:
    data = {"current_password": current, "new_password1": one, "new_password2": one if two is None else two}
    return client.post(PASSWORD_URL, data)


# ---- the services ---------------------------------------------------------------------------------------


def test_password_change_asks_the_current_one_and_applies_the_validators(alice: User) -> None:
    with pytest.raises(InvalidRequest) as wrong:
        self_service.password_change(user=alice, current_password="guess", new_password=NEW)
    assert wrong.value.param == "current_password"
    for weak, reason in (
        ("short", "too short"),
        ("1234567890", "entirely numeric"),
        ("alice123", "similar"),
    ):
        with pytest.raises(InvalidRequest) as refused:
            self_service.password_change(user=alice, current_password=OLD, new_password=weak)
        assert refused.value.param == "new_password1" and reason in refused.value.message
    alice.refresh_from_db()
    assert alice.check_password(OLD)
    self_service.password_change(user=alice, current_password=OLD, new_password=NEW)
    alice.refresh_from_db()
    assert alice.check_password(NEW) and not alice.check_password(OLD)
    assert AuditLog.objects.filter(action="account.password", target="alice").count() == 1


def test_email_change_asks_the_current_password_and_keeps_emails_apart(alice: User) -> None:
    User.objects.create_user("bob", email="bob@example.com", password=OLD)
    with pytest.raises(InvalidRequest) as wrong:
        self_service.email_change(user=alice, email="new@example.com", current_password="guess")
    assert wrong.value.param == "current_password"
    with pytest.raises(InvalidRequest) as taken:
        self_service.email_change(user=alice, email="BOB@example.com", current_password=OLD)
    assert taken.value.param == "email"
    with pytest.raises(InvalidRequest):
        self_service.email_change(user=alice, email="not an email", current_password=OLD)
    self_service.email_change(
        user=alice, email=" ALICE@example.com ", current_password=OLD
    )  # own, in any case
    alice.refresh_from_db()
    assert alice.email == "ALICE@example.com"
    entry = AuditLog.objects.get(action="account.email")
    assert entry.before == {"email": "alice@example.com"} and entry.after == {"email": "ALICE@example.com"}


def test_an_sso_account_has_no_password_to_change() -> None:
    sso = User.objects.create_user("sso-user")  # no password: set_unusable_password
    for call in (
        lambda: self_service.password_change(user=sso, current_password="", new_password=NEW),
        lambda: self_service.email_change(user=sso, email="x@example.com", current_password=""),
    ):
        with pytest.raises(InvalidRequest) as refused:
            call()
        assert refused.value.code == "no_password"
    html = signed_in(sso).get("/settings/").content.decode()
    assert 'id="account-sso"' in html and 'id="password-form"' not in html


# ---- the page -------------------------------------------------------------------------------------------


def test_the_settings_page_has_an_account_section(alice: User) -> None:
    html = signed_in(alice).get("/settings/").content.decode()
    assert 'id="account"' in html and 'href="#account"' in html
    assert 'id="password-form"' in html and f'action="{reverse("preferences:account-password")}"' in html
    assert 'id="email-form"' in html and 'value="alice@example.com"' in html
    assert 'autocomplete="current-password"' in html and "at least 8 characters" in html


def test_a_new_password_logs_out_the_other_sessions_only(alice: User) -> None:
    here, elsewhere = signed_in(alice), signed_in(alice)
    assert elsewhere.get("/settings/").status_code == 200
    response = change(here)
    assert response.status_code == 302 and response["Location"] == "/settings/#account"
    alice.refresh_from_db()
    assert alice.check_password(NEW)
    page = here.get("/settings/")
    assert page.status_code == 200 and "Password changed" in page.content.decode()  # still signed in
    gone = elsewhere.get("/settings/")
    assert gone.status_code == 302 and "/login/" in gone["Location"]
    # The new password logs in; the old one no longer does.
    assert Client().login(username="alice", password=NEW)
    assert not Client().login(username="alice", password=OLD)


@pytest.mark.parametrize(
    ("fields", "field_id", "reason"),
    [
        ({"current": "wrong-guess"}, "acc-current-error", "Your current password is not right."),
        ({"current": ""}, "acc-current-error", "Enter your current password."),
        ({"two": "something-else-12"}, "acc-new2-error", "The two new passwords differ."),
        ({"one": "short"}, "acc-new1-error", "too short"),
        ({"one": "password123"}, "acc-new1-error", "too common"),
        ({"one": ""}, "acc-new1-error", "Enter a new password."),
    ],
)
def test_refusals_come_back_by_their_field(
    alice: User, fields: dict[str, str], field_id: str, reason: str
) -> None:
    client = signed_in(alice)
    response = change(client, **fields)
    html = response.content.decode()
    assert response.status_code == 400
    assert f'id="{field_id}"' in html and reason in html
    assert f'aria-describedby="{field_id}"' in html or f' {field_id}"' in html  # tied to its field
    for typed in fields.values():  # a password field never comes back filled in
        assert not typed or f'value="{typed}"' not in html
    alice.refresh_from_db()
    assert alice.check_password(OLD)
    assert client.get("/settings/").status_code == 200  # a refusal logs nobody out


def test_an_empty_or_odd_post_is_a_400_not_a_500(alice: User) -> None:
    client = signed_in(alice)
    assert client.post(PASSWORD_URL, {}).status_code == 400
    assert client.post(EMAIL_URL, {}).status_code == 400
    assert client.post(PASSWORD_URL, {"new_password1": "x" * 5000}).status_code == 400
    assert client.get(PASSWORD_URL).status_code == 405 and client.get(EMAIL_URL).status_code == 405


def test_email_change_on_the_page(alice: User) -> None:
    User.objects.create_user("bob", email="bob@example.com", password=OLD)
    client = signed_in(alice)
    taken = client.post(EMAIL_URL, {"email": "Bob@Example.com", "current_password": OLD})
    assert taken.status_code == 400 and 'id="acc-email-error"' in taken.content.decode()
    assert 'value="Bob@Example.com"' in taken.content.decode()  # what was typed stays, to be fixed
    wrong = client.post(EMAIL_URL, {"email": "alice@work.example", "current_password": "guess"})
    assert wrong.status_code == 400 and 'id="acc-email-password-error"' in wrong.content.decode()
    invalid = client.post(EMAIL_URL, {"email": "nope", "current_password": OLD})
    assert invalid.status_code == 400 and "Enter a valid email address." in invalid.content.decode()
    alice.refresh_from_db()
    assert alice.email == "alice@example.com"
    done = client.post(EMAIL_URL, {"email": "alice@work.example", "current_password": OLD})
    assert done.status_code == 302 and done["Location"] == "/settings/#account"
    alice.refresh_from_db()
    assert alice.email == "alice@work.example"
    assert 'value="alice@work.example"' in client.get("/settings/").content.decode()


def test_account_changes_need_login(alice: User) -> None:
    for url in (PASSWORD_URL, EMAIL_URL):
        response = Client().post(url, {"current_password": OLD, "new_password1": NEW, "new_password2": NEW})
        assert response.status_code == 302 and "/login/" in response["Location"]
    alice.refresh_from_db()
    assert alice.check_password(OLD)
