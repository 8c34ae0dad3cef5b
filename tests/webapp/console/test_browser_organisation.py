"""Groups, quotas and usage end to end with the real model, in Chromium against a live Daphne: staff make a
group with a daily quota on the Groups page, a member's chat reply uses it up so their next send is refused
in the chat, and the Usage page shows the group's tokens; the Users, Groups and Usage pages fit a phone."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in as chat_log_in
from tests.webapp.chat.test_browser import send, set_max_tokens, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MEMBER, MEMBER_PASSWORD = "org-member", "org-member-password-1"
STAFF, STAFF_PASSWORD = "org-staff", "org-staff-password-1"
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(MEMBER, MEMBER_PASSWORD)
    daphne_server.create_user(STAFF, STAFF_PASSWORD, staff=True)
    return daphne_server


def staff_page(browser: Any, server: LiveDaphne, path: str, **context_args: Any) -> Any:
    context = browser.new_context(**(context_args or {"viewport": {"width": 1400, "height": 900}}))
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(server.url + f"/login/?next={path}")
    page.fill("input[name=username]", STAFF)
    page.fill("input[name=password]", STAFF_PASSWORD)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(re.escape(path) + "$"))
    return page


def fits_the_width(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_a_group_quota_used_up_in_the_chat_shows_on_the_usage_page(browser: Any, server: LiveDaphne) -> None:
    page = staff_page(browser, server, "/console/groups/")
    page.fill("#group-create input[name=name]", "research")
    page.click("#group-create [type=submit]")
    page.wait_for_url(re.compile(r"/console/groups/\d+/$"))
    page.fill("#member-add input[name=username]", MEMBER)
    page.click("#member-add [type=submit]")
    page.locator(f'#members [data-member="{MEMBER}"]').wait_for()
    page.fill("#group-policy input[name=daily_token_quota]", "1")
    page.click("#group-policy [type=submit]")
    page.locator(".toasts", has_text="Saved the limits of research").wait_for()
    assert page.input_value("#group-policy input[name=daily_token_quota]") == "1"

    chat = chat_log_in(
        browser, server, username=MEMBER, password=MEMBER_PASSWORD, viewport={"width": 1280, "height": 800}
    )
    set_max_tokens(chat, 8)
    send(chat, "Say hi.")  # admitted: nothing was used yet today
    wait_idle(chat)
    chat.fill("#composer-input", "And again.")
    chat.press("#composer-input", "Enter")
    notice = chat.locator("#chat-error")
    notice.wait_for(state="visible")
    assert "Daily token quota reached" in notice.inner_text() and "research" in notice.inner_text()
    assert chat.input_value("#composer-input") == "And again."
    chat.context.close()

    page.goto(server.url + "/console/usage/?by=group")
    row = page.locator('#usage-table tr[data-key="research"]')
    row.wait_for()
    cells = row.locator("td")
    assert int(cells.nth(1).inner_text()) >= 2  # the reply and the refusal
    assert int(cells.nth(5).inner_text()) > 1  # its tokens
    assert page.locator("#usage-chart rect.completion").count() == 30
    page.click('#usage-table th a:has-text("Total tokens")')
    page.wait_for_url(re.compile(r"sort=-total_tokens"))
    with page.expect_download() as download:
        page.click("#usage-csv")
    assert download.value.suggested_filename.startswith("mooncake-usage-group-")
    page.goto(server.url + "/settings/")
    page.context.close()

    member = chat_log_in(
        browser, server, username=MEMBER, password=MEMBER_PASSWORD, viewport={"width": 1280, "height": 800}
    )
    member.goto(server.url + "/settings/")
    quota = member.locator('#quota-lines [data-scope="group"]')
    assert "research" in quota.inner_text() and "used up until 00:00 UTC" in quota.inner_text()
    member.context.close()


@pytest.mark.parametrize("path", ["/console/users/", "/console/groups/", "/console/usage/", "/console/site/"])
def test_the_organisation_pages_fit_a_phone(browser: Any, server: LiveDaphne, path: str) -> None:
    page = staff_page(browser, server, path, viewport=PHONE, is_mobile=True, has_touch=True)
    assert fits_the_width(page), f"{path} scrolls sideways at 390 px"
    if path == "/console/groups/":
        page.fill("#group-create input[name=name]", "phones")
        page.click("#group-create [type=submit]")
        page.wait_for_url(re.compile(r"/console/groups/\d+/$"))
        assert fits_the_width(page), "a group's page scrolls sideways at 390 px"
        assert page.locator("#group-policy [type=submit]").is_visible()
    page.context.close()
