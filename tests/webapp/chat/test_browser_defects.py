"""The chat's controls in a real browser: the composer's Send/Stop swap, the phone chat list, renaming in
place, inline form errors, and the designed error pages. Chromium via Playwright against a live Daphne."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in as shared_log_in
from tests.webapp.chat.test_browser import send, set_max_tokens, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "chat-controls", "chat-controls-password-1"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD)
    return daphne_server


def log_in(browser: Any, server: LiveDaphne, **context_args: Any) -> Any:
    return shared_log_in(browser, server, username=USER, password=PASSWORD, **context_args)


def test_send_and_stop_never_show_together(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, viewport=DESKTOP)
    assert page.locator("#send-btn").is_visible() and page.locator("#stop-btn").is_hidden()
    set_max_tokens(page, 400)
    send(page, "Write a very long story about a lighthouse keeper.")
    assert page.locator("#stop-btn").is_visible()
    assert page.locator("#send-btn").is_hidden()
    page.click("#stop-btn")
    wait_idle(page, timeout=30_000)
    assert page.locator("#send-btn").is_visible() and page.locator("#stop-btn").is_hidden()
    page.context.close()


def test_phone_chat_list_can_be_closed(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, viewport=PHONE, is_mobile=True, has_touch=True)
    toggle = page.locator("#sidebar-toggle")
    sidebar = page.locator("#chat-sidebar")
    backdrop = page.locator("#sidebar-backdrop")
    assert sidebar.is_hidden() and toggle.get_attribute("aria-expanded") == "false"

    def open_list() -> None:
        toggle.click()
        assert sidebar.is_visible() and backdrop.is_visible()
        assert toggle.get_attribute("aria-expanded") == "true"

    def assert_closed() -> None:
        page.wait_for_selector("#chat-sidebar", state="hidden", timeout=5_000)
        assert backdrop.is_hidden()
        assert toggle.get_attribute("aria-expanded") == "false"
        assert page.evaluate("document.activeElement.id") == "sidebar-toggle"

    # A close button inside the list, named for screen readers.
    open_list()
    close = page.get_by_role("button", name="Close chats")
    assert close.is_visible()
    box = close.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    close.click()
    assert_closed()

    # Esc.
    open_list()
    page.keyboard.press("Escape")
    assert_closed()

    # A tap on the dimmed page beside the list.
    open_list()
    list_box = sidebar.bounding_box()
    assert list_box is not None and list_box["x"] + list_box["width"] < PHONE["width"]
    page.touchscreen.tap(PHONE["width"] - 20, PHONE["height"] / 2)
    assert_closed()
    page.context.close()


def test_rename_in_place_reaches_other_tabs(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, viewport=DESKTOP)
    set_max_tokens(page, 8)
    send(page, "Say hi.")
    wait_idle(page)
    url = page.url
    other = page.context.new_page()
    other.goto(url)
    other.wait_for_selector("#chat[data-connected=true]")
    current = "#conv-list .conv-item.current .conv-title"

    # Enter renames without leaving the page.
    page.evaluate("window.__stayed = true")
    page.fill("#title-input", "Lighthouse notes")
    page.press("#title-input", "Enter")
    page.wait_for_function(f"() => document.querySelector({current!r}).textContent === 'Lighthouse notes'")
    page.wait_for_timeout(500)  # Long enough for a page load to have begun.
    assert page.evaluate("window.__stayed") is True
    assert page.url == url
    # The other tab follows at once: header, sidebar and window title.
    other.wait_for_function("() => document.getElementById('title-input').value === 'Lighthouse notes'")
    other.wait_for_function(f"() => document.querySelector({current!r}).textContent === 'Lighthouse notes'")
    assert other.title().startswith("Lighthouse notes")

    # Leaving the field renames too.
    page.fill("#title-input", "Keeper's log")
    page.click("#composer-input")
    page.wait_for_function(f'() => document.querySelector({current!r}).textContent === "Keeper\'s log"')
    other.wait_for_function("() => document.getElementById('title-input').value === \"Keeper's log\"")

    # A blank title is refused with a message, and the stored one stays.
    page.fill("#title-input", "   ")
    page.press("#title-input", "Enter")
    error = page.locator("#title-error")
    error.wait_for()
    assert "blank" in error.inner_text()
    assert page.evaluate("window.__stayed") is True
    page.reload()
    assert page.input_value("#title-input") == "Keeper's log"
    page.context.close()


def test_settings_errors_show_inline(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, viewport=DESKTOP)
    page.click("#settings-toggle")
    page.fill("#set-temperature", "")
    page.click(".settings-form [type=submit]")
    error = page.locator("#set-temperature-error")
    error.wait_for(timeout=10_000)
    assert "required" in error.inner_text().lower()
    assert page.get_attribute("#set-temperature", "aria-invalid") == "true"
    assert page.locator(".settings-form .saved").count() == 0

    page.fill("#set-temperature", "0.6")
    page.click(".settings-form [type=submit]")
    page.wait_for_selector(".settings-form .saved:text('Saved')", timeout=10_000)
    assert page.locator("#set-temperature-error").count() == 0
    assert page.input_value("#set-temperature") == "0.6"
    page.context.close()


def test_error_pages_are_designed(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, viewport=DESKTOP)
    light_background = "rgb(251, 250, 247)"  # mooncake.css's light theme: the site's stylesheet applies.

    response = page.goto(server.url + "/console/")
    assert response is not None and response.status == 403
    assert page.locator("header.topbar").is_visible()
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == light_background
    assert "admin" in page.locator("main").inner_text().lower()
    page.locator("main a[href='/chat/']").click()
    page.wait_for_url(re.compile(r"/chat/\d+/$"))

    response = page.goto(server.url + "/no-such-page/")
    assert response is not None and response.status == 404
    assert page.locator("header.topbar").is_visible()
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == light_background
    assert page.locator("main a[href='/chat/']").is_visible()
    page.context.close()
