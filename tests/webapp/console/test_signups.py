"""Console: sign-up settings, pending accounts (approve/reject) and who may do it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.accounts.models import AccountStatus, SignupSettings
from webapp.console.models import AuditLog

pytestmark = pytest.mark.django_db
PASSWORD = "pending-pass-phrase-1"


def pending(username: str = "waiting") -> User:
    user = User.objects.create_user(
        username, email=f"{username}@example.org", password=PASSWORD, is_active=False
    )
    AccountStatus.objects.create(user=user, source=AccountStatus.Source.SIGNUP)
    return user


@pytest.mark.database
def test_page_lists_pending_accounts_with_confirmed_reject(staff_client: Client) -> None:
    user = pending()
    page = staff_client.get("/console/accounts/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f'id="pending-{user.pk}"' in text and "waiting@example.org" in text
    assert f'action="/console/accounts/{user.pk}/reject/" class="inline-form" data-confirm="Reject' in text
    assert 'href="/console/accounts/" aria-current="page">Sign-ups &amp; locks</a>' in text


def test_approve_lets_the_user_log_in(staff_client: Client, staff: User) -> None:
    user = pending()
    response = staff_client.post(f"/console/accounts/{user.pk}/approve/")
    assert response.status_code == 302
    user.refresh_from_db()
    assert user.is_active and user.account_status.state == AccountStatus.State.APPROVED
    assert user.account_status.decided_by == staff
    entry = AuditLog.objects.get(action="account.approve")
    assert (entry.actor, entry.target, entry.after["state"]) == (staff, "waiting", "approved")
    client = Client()
    assert client.post("/login/", {"username": "waiting", "password": PASSWORD}).status_code == 302
    # Deciding twice is a 404, not a second audit entry.
    assert staff_client.post(f"/console/accounts/{user.pk}/reject/").status_code == 404
    assert AuditLog.objects.filter(action__startswith="account.").count() == 1


@pytest.mark.database
def test_reject_keeps_the_account_out(staff_client: Client) -> None:
    user = pending()
    assert staff_client.post(f"/console/accounts/{user.pk}/reject/").status_code == 302
    user.refresh_from_db()
    assert not user.is_active and user.account_status.state == AccountStatus.State.REJECTED
    assert AuditLog.objects.filter(action="account.reject", target="waiting").exists()
    response = Client().post("/login/", {"username": "waiting", "password": PASSWORD})
    assert b"was declined" in response.content
    page = staff_client.get("/console/accounts/").content.decode()
    assert f'id="pending-{user.pk}"' not in page and "No account is waiting for approval." in page


def test_only_staff_may_decide(plain: User, staff: User) -> None:
    user = pending()
    client = Client()
    client.force_login(plain)
    for url in (
        "/console/accounts/",
        f"/console/accounts/{user.pk}/approve/",
        f"/console/accounts/{user.pk}/reject/",
    ):
        method = client.get if url.endswith("accounts/") else client.post
        assert method(url).status_code == 403
    anonymous = Client().post(f"/console/accounts/{user.pk}/approve/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    user.refresh_from_db()
    assert not user.is_active


def test_unknown_ids_and_methods(staff_client: Client, plain: User) -> None:
    assert staff_client.post("/console/accounts/999999/approve/").status_code == 404
    assert staff_client.post(f"/console/accounts/{plain.pk}/approve/").status_code == 404  # not pending
    assert staff_client.get(f"/console/accounts/{pending().pk}/approve/").status_code == 405


@pytest.mark.database
def test_signup_settings_are_saved_and_audited(staff_client: Client, staff: User) -> None:
    response = staff_client.post(
        "/console/accounts/signup/",
        {"enabled": "on", "auto_approve_domains": "Example.org\n@corp.example, example.org"},
    )
    assert response.status_code == 302
    row = SignupSettings.objects.get(pk=1)
    assert row.enabled and row.domains == ["example.org", "corp.example"]
    entry = AuditLog.objects.get(action="signup.settings")
    assert entry.before == {"enabled": False, "auto_approve_domains": []}
    assert entry.after == {"enabled": True, "auto_approve_domains": ["example.org", "corp.example"]}
    assert b"example.org\ncorp.example" in staff_client.get("/console/accounts/").content


@pytest.mark.database
@pytest.mark.parametrize(
    ("value", "message"),
    [("not a domain", "Not a domain name: not, a, domain"), ("a" * 20001, "at most 20000 characters"),
     ("\n".join(f"d{i}.example" for i in range(201)), "At most 200 domains")],
)  # fmt: skip
def test_bad_domains_are_answered_inline(staff_client: Client, value: str, message: str) -> None:
    response = staff_client.post(
        "/console/accounts/signup/", {"enabled": "on", "auto_approve_domains": value}
    )
    assert response.status_code == 400 and message in response.content.decode()
    assert not SignupSettings.objects.exists()


def test_non_staff_cannot_change_settings(plain: User) -> None:
    client = Client()
    client.force_login(plain)
    assert client.post("/console/accounts/signup/", {"enabled": "on"}).status_code == 403
    assert not SignupSettings.objects.exists()
