"""Sign-up with approval, single sign-on against a real provider, and the login lock, in a real browser.

A live Daphne (no model needed) is configured by environment for the OIDC provider this test runs on a
loopback port; Chromium follows the real redirects between the two.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne
from tests.webapp.accounts.oidc_provider import CLIENT_ID, CLIENT_SECRET, Provider, start_provider

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ADMIN, ADMIN_PASSWORD = "boss", "boss-pass-phrase-77"


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    running = start_provider()
    running.claims = {
        "sub": "ada-sub",
        "email": "ada@corp.example",
        "email_verified": True,
        "preferred_username": "ada",
    }
    yield running
    running.stop()


@pytest.fixture(scope="module")
def server(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """Its own server: single sign-on against the test's provider and a lockout after 3 failures are settings
    read at start."""
    env = {
        "MOONCAKE_OIDC_ISSUER": provider.url,
        "MOONCAKE_OIDC_CLIENT_ID": CLIENT_ID,
        "MOONCAKE_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "MOONCAKE_OIDC_PROVIDER_NAME": "Corp ID",
        "MOONCAKE_LOGIN_FAILURE_LIMIT": "3",
    }
    live = start_live_daphne(Path(tmp_path_factory.mktemp("accounts-live")), env=env, autoload=False)
    live.create_user(ADMIN, ADMIN_PASSWORD, staff=True)
    yield live
    stop_live_daphne(live)


def new_page(browser: Any) -> Any:
    context = browser.new_context()
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the console's confirmations
    return page


def log_in(page: Any, server: LiveDaphne, username: str, password: str) -> None:
    page.goto(server.url + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form[action='/login/'] [type=submit]")


def admin_page(browser: Any, server: LiveDaphne) -> Any:
    page = new_page(browser)
    log_in(page, server, ADMIN, ADMIN_PASSWORD)
    page.wait_for_url(re.compile(r"/chat/"))
    page.goto(server.url + "/console/")
    page.click("nav.console-nav >> text=Sign-ups & locks")
    page.wait_for_selector("#signup-settings-form")
    return page


def approve(admin: Any, server: LiveDaphne, username: str) -> None:
    admin.goto(server.url + "/console/accounts/")
    row = admin.locator("#pending-accounts tr", has_text=username)
    row.locator("button", has_text="Approve").click()
    admin.wait_for_selector(f".message-success:has-text('Approved {username}')")


def test_sign_up_wait_for_approval_then_log_in(browser: Any, server: LiveDaphne) -> None:
    admin = admin_page(browser, server)
    admin.check("#id_enabled")
    admin.click("#signup-settings-form [type=submit]")
    admin.wait_for_selector(".message-success:has-text('Sign-up settings saved')")

    user = new_page(browser)
    user.goto(server.url + "/login/")
    user.click("text=Sign up")
    user.fill("#id_username", "newbie")
    user.fill("#id_email", "newbie@example.org")
    user.fill("#id_password1", "a-long-pass-phrase-9")
    user.fill("#id_password2", "a-different-phrase-9")
    user.click("#signup-form [type=submit]")
    assert "The two passwords differ" in user.inner_text("#password2-errors")
    user.fill("#id_password1", "a-long-pass-phrase-9")
    user.fill("#id_password2", "a-long-pass-phrase-9")
    user.click("#signup-form [type=submit]")
    assert "waiting for approval" in user.inner_text("#signup-pending")

    log_in(user, server, "newbie", "a-long-pass-phrase-9")
    assert "waiting for approval by an administrator" in user.inner_text("#login-errors")

    approve(admin, server, "newbie")
    log_in(user, server, "newbie", "a-long-pass-phrase-9")
    user.wait_for_url(re.compile(r"/chat/"))
    assert user.inner_text(".topbar .user") == "newbie"


def test_single_sign_on_pending_approved_and_a_forged_token(
    browser: Any, server: LiveDaphne, provider: Provider
) -> None:
    user = new_page(browser)
    user.goto(server.url + "/login/")
    user.click("#sso-login >> text=Log in with Corp ID")
    user.wait_for_selector("#sso-error")
    assert "waiting for approval" in user.inner_text("#sso-error")

    approve(admin_page(browser, server), server, "ada")
    user.goto(server.url + "/login/")
    user.click("#sso-login")
    user.wait_for_url(re.compile(r"/chat/"))
    assert user.inner_text(".topbar .user") == "ada"

    provider.mode = "bad_signature"
    try:
        other = new_page(browser)
        other.goto(server.url + "/login/")
        other.click("#sso-login")
        other.wait_for_selector("#sso-error")
        assert "signature is not valid" in other.inner_text("#sso-error")
        assert other.locator(".topbar .user").count() == 0
    finally:
        provider.mode = "ok"


def test_lockout_message_and_admin_unlock(browser: Any, server: LiveDaphne) -> None:
    server.create_user("victim", "victim-pass-phrase-1")
    # Logged in first: the failures below lock the account at this address, which the admin shares.
    admin = admin_page(browser, server)
    user = new_page(browser)
    for _ in range(3):
        log_in(user, server, "victim", "wrong-password")
    assert "Too many failed logins" in user.inner_text("#login-lockout")
    log_in(user, server, "victim", "victim-pass-phrase-1")
    assert "Too many failed logins" in user.inner_text("#login-lockout")

    admin.reload()
    lock = admin.locator("#login-locks tr", has_text="victim")
    lock.locator("button", has_text="Unlock").click()
    admin.wait_for_selector(".message-success:has-text('Unlocked account victim')")

    # Unlocked, the account logs in from that address again.
    log_in(user, server, "victim", "victim-pass-phrase-1")
    user.wait_for_url(re.compile(r"/chat/"))
    assert user.inner_text(".topbar .user") == "victim"
