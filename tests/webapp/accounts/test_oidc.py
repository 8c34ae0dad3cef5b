"""Single sign-on end to end against a real OpenID Connect provider on a loopback port.

The browser's part (following redirects) is played by the test client and `requests`; the server's part
is real: discovery, the token exchange with PKCE, JWKS and the RS256 signature, audience, issuer, expiry
and nonce checks all run over HTTP against the provider.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.accounts.oidc_provider import CLIENT_ID, Provider
from webapp.accounts.models import AccountStatus, SignupSettings, SsoIdentity
from webapp.accounts.oidc import check_id_token_claims
from webapp.accounts.signup import SsoRefused
from webapp.console.models import AuditLog

pytestmark = pytest.mark.django_db


def sso_login(client: Client, provider: Provider) -> Any:
    """Start at our button, let the provider consent, come back; returns the callback's response."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    assert start["Location"].startswith(provider.url + "/authorize?")
    assert "code_challenge=" in start["Location"] and "nonce=" in start["Location"]
    consent = requests.get(start["Location"], allow_redirects=False, timeout=10)
    assert consent.status_code == 302
    callback = consent.headers["Location"]
    assert callback.startswith("http://testserver/oidc/callback/?")
    return client.get(callback.removeprefix("http://testserver"))


def login_page_error(client: Client) -> str:
    page = client.get("/login/")
    assert page.status_code == 200
    text = page.content.decode()
    start = text.find('id="sso-error">')
    assert start != -1, "no SSO error shown on the login page"
    return text[start + len('id="sso-error">') : text.find("</p>", start)]


def test_login_page_shows_the_button_only_when_configured(admin: User, settings: Any) -> None:
    settings.MOONCAKE_OIDC_ISSUER = ""
    assert b'id="sso-login"' not in Client().get("/login/").content
    assert Client().get("/oidc/authenticate/").status_code == 404
    settings.MOONCAKE_OIDC_ISSUER, settings.OIDC_RP_CLIENT_ID = "https://id.example.com", "x"
    settings.MOONCAKE_OIDC_PROVIDER_NAME = "Acme ID"
    page = Client().get("/login/?next=/chat/").content.decode()
    assert 'id="sso-login" href="/oidc/authenticate/?next=/chat/"' in page
    assert "Log in with Acme ID" in page


@pytest.mark.database
def test_first_login_creates_a_pending_user_then_approval_lets_them_in(provider: Provider) -> None:
    client = Client()
    response = sso_login(client, provider)
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert "waiting for approval" in login_page_error(client)
    user = User.objects.get(sso_identities__subject="user-1")
    assert (user.username, user.email, user.is_active) == ("ada", "ada@corp.example", False)
    assert user.account_status.state == AccountStatus.State.PENDING
    assert user.account_status.source == AccountStatus.Source.SSO
    assert sorted(user.groups.values_list("name", flat=True)) == ["engineers", "gpu-users"]
    assert AuditLog.objects.filter(action="account.sso_create", target="ada").exists()
    assert "_auth_user_id" not in client.session

    admin = Client()
    admin.force_login(User.objects.get(username="admin"))
    assert admin.post(f"/console/accounts/{user.pk}/approve/").status_code == 302

    provider.claims["groups"] = ["engineers"]  # the provider took one group away
    response = sso_login(client, provider)
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.session["_auth_user_id"] == str(user.pk)
    assert list(user.groups.values_list("name", flat=True)) == ["engineers"]
    assert User.objects.filter(sso_identities__isnull=False).count() == 1  # the same account, not a new one


@pytest.mark.database
def test_auto_approved_domain_logs_in_at_once(provider: Provider) -> None:
    SignupSettings.objects.create(pk=1, enabled=False, auto_approve_domains="corp.example")
    client = Client()
    response = sso_login(client, provider)
    assert response["Location"] == "/"
    user = User.objects.get(username="ada")
    assert user.is_active and user.account_status.state == AccountStatus.State.APPROVED
    assert client.session["_auth_user_id"] == str(user.pk)


@pytest.mark.database
def test_unverified_email_is_not_auto_approved(provider: Provider) -> None:
    SignupSettings.objects.create(pk=1, auto_approve_domains="corp.example")
    provider.claims["email_verified"] = False
    sso_login(Client(), provider)
    assert User.objects.get(username="ada").account_status.state == AccountStatus.State.PENDING


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("bad_signature", "signature is not valid"),
        ("wrong_audience", "different application (audience)"),
        ("expired", "token has expired"),
        ("wrong_nonce", "does not belong to this sign-in (nonce)"),
    ],
)
def test_bad_tokens_are_refused_with_a_clear_message(provider: Provider, mode: str, message: str) -> None:
    provider.mode = mode
    client = Client()
    response = sso_login(client, provider)
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert message in login_page_error(client)
    assert provider.token_requests == 1  # refused after a real token exchange, not before
    assert not User.objects.filter(username="ada").exists()
    assert not SsoIdentity.objects.exists()
    assert "_auth_user_id" not in client.session


@pytest.mark.database
def test_allowed_domains_refuse_other_domains(provider: Provider, settings: Any) -> None:
    settings.MOONCAKE_OIDC_ALLOWED_DOMAINS = ["other.example"]
    client = Client()
    sso_login(client, provider)
    assert "corp.example may not sign in" in login_page_error(client)
    assert not User.objects.filter(username="ada").exists()


@pytest.mark.database
def test_rejected_account_is_told_so(provider: Provider) -> None:
    sso_login(Client(), provider)
    user = User.objects.get(username="ada")
    admin = Client()
    admin.force_login(User.objects.get(username="admin"))
    admin.post(f"/console/accounts/{user.pk}/reject/")
    client = Client()
    sso_login(client, provider)
    assert "declined" in login_page_error(client)
    assert User.objects.filter(sso_identities__isnull=False).count() == 1


@pytest.mark.database
def test_username_collision_gets_a_suffix(provider: Provider) -> None:
    User.objects.create_user("ada", password="x-unused-password-1")
    sso_login(Client(), provider)
    assert User.objects.get(sso_identities__subject="user-1").username == "ada-2"


def test_forged_or_stale_callback_is_a_message_not_an_error(provider: Provider) -> None:
    client = Client()
    client.get("/oidc/authenticate/")  # a state in the session, but not this one
    response = client.get("/oidc/callback/?code=abc&state=forged")
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert "not started from this browser" in login_page_error(client)
    fresh = Client()
    assert fresh.get("/oidc/callback/?code=abc&state=forged")["Location"] == "/login/"
    assert "not started from this browser" in login_page_error(fresh)


def test_provider_error_is_shown(provider: Provider) -> None:
    client = Client()
    client.get("/oidc/authenticate/")
    client.get("/oidc/callback/?error=access_denied&error_description=User+cancelled")
    assert "did not sign you in: User cancelled" in login_page_error(client)


def test_discovery_naming_another_issuer_is_refused(provider: Provider, settings: Any) -> None:
    settings.MOONCAKE_OIDC_ISSUER = provider.url + "/realms/other"  # its discovery 404s
    client = Client()
    assert client.get("/oidc/authenticate/")["Location"] == "/login/"
    assert "cannot be reached" in login_page_error(client)


@pytest.mark.database
def test_explicit_endpoints_skip_discovery(provider: Provider, settings: Any) -> None:
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = provider.url + "/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = provider.url + "/token"
    settings.OIDC_OP_JWKS_ENDPOINT = provider.url + "/jwks"
    settings.OIDC_OP_USER_ENDPOINT = ""
    client = Client()
    assert sso_login(client, provider)["Location"] == "/login/"
    assert "waiting for approval" in login_page_error(client)


NOW = time.time()
GOOD = {"iss": "https://id.example.com", "aud": CLIENT_ID, "exp": NOW + 60, "iat": NOW, "sub": "s"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"iss": "https://evil.example.com"}, "different identity provider"),
        ({"aud": ["a", "b"]}, "audience"),
        ({"aud": [CLIENT_ID, "b"], "azp": "b"}, "audience"),
        ({"aud": 5}, "audience"),
        ({"exp": None}, "no expiry"),
        ({"exp": "soon"}, "no expiry"),
        ({"exp": NOW - 61}, "expired"),
        ({"iat": NOW + 3600}, "not valid yet"),
        ({"nbf": NOW + 3600}, "not valid yet"),
    ],
)
def test_claim_checks_refuse(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SsoRefused, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_id_token_claims(
            {**GOOD, **changes}, issuer="https://id.example.com", client_id=CLIENT_ID, now=NOW
        )


def test_claim_checks_accept_valid_and_small_clock_skew() -> None:
    check_id_token_claims(GOOD, issuer="https://id.example.com", client_id=CLIENT_ID, now=NOW)
    check_id_token_claims(
        {**GOOD, "aud": [CLIENT_ID, "b"], "azp": CLIENT_ID, "exp": NOW - 30},
        issuer="https://id.example.com", client_id=CLIENT_ID, now=NOW,
    )  # fmt: skip
