"""Login throttling: an account locked at the address its failures came from, an address locked at its own
higher bound, the message, and the console's unlock."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory

from webapp.accounts.throttle import client_ip
from webapp.console.models import AuditLog

pytestmark = pytest.mark.django_db
PASSWORD = "victim-pass-phrase-1"


@pytest.fixture(autouse=True)
def limit(settings: Any) -> int:
    settings.AXES_FAILURE_LIMIT = 3
    return 3


@pytest.fixture
def victim(admin: User) -> User:
    return User.objects.create_user("victim", password=PASSWORD)


def attempt(username: str, password: str, ip: str) -> Any:
    return Client(REMOTE_ADDR=ip).post("/login/", {"username": username, "password": password})


def test_an_account_locks_at_the_address_it_failed_from(victim: User) -> None:
    for _ in range(3):
        response = attempt("victim", "wrong", "10.0.0.1")
    assert response.status_code == 429
    text = response.content.decode()
    assert "Too many failed logins for this account or from this address" in text
    assert "Try again in 15 minutes" in text
    # The right password is refused there while the lock holds.
    locked = attempt("victim", PASSWORD, "10.0.0.1")
    assert locked.status_code == 429 and 'id="login-lockout"' in locked.content.decode()
    # The account's owner elsewhere is not locked out by someone else's guesses...
    assert attempt("victim", PASSWORD, "10.0.0.99").status_code == 302
    # ...nor is anyone else behind the same address (a shared NAT, a proxy).
    User.objects.create_user("bystander", password=PASSWORD)
    assert attempt("bystander", PASSWORD, "10.0.0.1").status_code == 302


def test_failures_spread_over_addresses_lock_nobody(victim: User) -> None:
    for n in range(6):
        assert attempt("victim", "wrong", f"10.0.0.{n + 1}").status_code == 200
    assert attempt("victim", PASSWORD, "10.0.0.50").status_code == 302


def test_an_address_locks_at_its_own_higher_bound_on_any_accounts(victim: User, settings: Any) -> None:
    settings.MOONCAKE_LOGIN_ADDRESS_FAILURE_LIMIT = 6
    for name in ("a", "b", "c", "d", "e"):
        attempt(name, "wrong", "10.9.9.9")
    assert attempt("victim", PASSWORD, "10.9.9.9").status_code == 302  # five: under the address's bound
    attempt("f", "wrong", "10.9.9.9")
    assert attempt("victim", PASSWORD, "10.9.9.9").status_code == 429
    assert attempt("victim", PASSWORD, "10.9.9.10").status_code == 302


def test_logging_in_to_another_account_does_not_wipe_the_count(victim: User) -> None:
    User.objects.create_user("mallory", password="mallory-pass-phrase-1")
    attempt("victim", "wrong", "10.0.0.1")
    attempt("victim", "wrong", "10.0.0.1")
    assert attempt("mallory", "mallory-pass-phrase-1", "10.0.0.2").status_code == 302
    assert attempt("mallory", "mallory-pass-phrase-1", "10.0.0.1").status_code == 302
    assert attempt("victim", "wrong", "10.0.0.1").status_code == 429


@pytest.mark.database
def test_admin_sees_and_lifts_a_lock(victim: User, admin_client: Client, admin: User) -> None:
    for _ in range(3):
        attempt("victim", "wrong", "10.0.0.1")
    page = admin_client.get("/console/accounts/").content.decode()
    assert "<td>Account</td><td>victim from 10.0.0.1</td><td>3</td>" in page
    assert 'data-confirm="Unlock account victim from 10.0.0.1?"' in page
    response = admin_client.post("/console/accounts/unlock/", {"kind": "account", "value": "victim 10.0.0.1"})
    assert response.status_code == 302
    assert attempt("victim", PASSWORD, "10.0.0.1").status_code == 302
    entry = AuditLog.objects.get(action="login.unlock")
    assert (entry.actor, entry.target, entry.before) == (
        admin,
        "account victim from 10.0.0.1",
        {"failures": 3},
    )
    assert "Nothing is locked." in admin_client.get("/console/accounts/").content.decode()


@pytest.mark.database
def test_address_locks_are_listed_and_lifted(victim: User, admin_client: Client, settings: Any) -> None:
    settings.MOONCAKE_LOGIN_ADDRESS_FAILURE_LIMIT = 3
    for name in ("a", "b", "c"):
        attempt(name, "wrong", "10.9.9.9")
    page = admin_client.get("/console/accounts/").content.decode()
    assert "<td>Address</td><td>10.9.9.9</td>" in page and "<td>Account</td>" not in page
    admin_client.post("/console/accounts/unlock/", {"kind": "ip_address", "value": "10.9.9.9"})
    assert attempt("victim", PASSWORD, "10.9.9.9").status_code == 302


@pytest.mark.database
@pytest.mark.parametrize(
    "data",
    [
        {},
        {"kind": "password", "value": "x"},
        {"kind": "account", "value": ""},
        {"kind": "account", "value": "x" * 300},
    ],
)
def test_bad_unlock_requests_are_400(admin_client: Client, data: dict[str, str]) -> None:
    response = admin_client.post("/console/accounts/unlock/", data)
    assert response.status_code == 400
    assert "Choose a lock from the list" in response.content.decode()
    assert not AuditLog.objects.filter(action="login.unlock").exists()


@pytest.mark.database
def test_unlocking_what_is_not_locked_says_so(admin_client: Client) -> None:
    response = admin_client.post(
        "/console/accounts/unlock/", {"kind": "account", "value": "nobody 10.0.0.1"}, follow=True
    )
    assert "nobody 10.0.0.1 is not locked" in response.content.decode()
    assert not AuditLog.objects.filter(action="login.unlock").exists()


def test_non_staff_cannot_unlock(victim: User) -> None:
    for _ in range(3):
        attempt("victim", "wrong", "10.0.0.1")
    client = Client()
    client.force_login(User.objects.create_user("plain", password=PASSWORD))
    data = {"kind": "account", "value": "victim 10.0.0.1"}
    assert client.post("/console/accounts/unlock/", data).status_code == 403
    assert attempt("victim", PASSWORD, "10.0.0.1").status_code == 429


def test_client_ip_trusts_only_its_own_proxies(settings: Any) -> None:
    factory = RequestFactory()
    request = factory.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.5")
    settings.MOONCAKE_PROXY_COUNT = 0
    assert client_ip(request) == "10.1.1.1"
    settings.MOONCAKE_PROXY_COUNT = 1
    assert client_ip(request) == "203.0.113.5"  # what nginx appended, not what the client claimed
    settings.MOONCAKE_PROXY_COUNT = 3
    assert client_ip(request) == "10.1.1.1"  # fewer hops than proxies: the header is not ours
    garbage = factory.get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="not-an-ip")
    settings.MOONCAKE_PROXY_COUNT = 1
    assert client_ip(garbage) == "10.1.1.1"
