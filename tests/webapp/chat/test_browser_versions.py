"""Reply versions, Continue and the model picker in a real browser (Chromium via Playwright) against a live
Daphne and the real model."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in as shared_log_in
from tests.webapp.chat.test_browser import send, set_max_tokens, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "chat-versions", "chat-versions-password-1"
DESKTOP = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD)
    return daphne_server


def log_in(browser: Any, server: LiveDaphne) -> Any:
    return shared_log_in(browser, server, username=USER, password=PASSWORD, viewport=DESKTOP)


def body(message: Any) -> str:
    text: str = message.locator(".msg-body").inner_text()
    return text


def wait_position(page: Any, selector: str, position: str) -> None:
    page.wait_for_selector(f"{selector} .branch-pos:text-is('{position}')", timeout=30_000)


def watch_for_stopped(page: Any) -> None:
    """Record in the page whether any reply shows a "stopped" badge from now on (a new version used to show
    as stopped from its first render until its first token)."""
    page.evaluate(
        """() => {
            window.stoppedSeen = false;
            const look = () => {
                for (const badge of document.querySelectorAll('#messages .msg-assistant .badge')) {
                    if (badge.textContent.trim() === 'stopped') window.stoppedSeen = true;
                }
            };
            new MutationObserver(look).observe(
                document.querySelector('#messages'), {childList: true, subtree: true, characterData: true});
        }"""
    )


def test_regenerate_and_edit_keep_versions(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server)
    set_max_tokens(page, 10)
    send(page, "Name a fruit.")
    wait_idle(page)
    reply = page.locator("#messages .msg-assistant").last
    first_text = body(reply)
    first_id = reply.get_attribute("id")
    assert reply.locator(".branch-nav").count() == 0  # one version: no arrows

    # Regenerate: a second version, and 2/2 with arrows to go between them; it shows as writing, never as
    # stopped, from its first render to its last token.
    watch_for_stopped(page)
    reply.locator(".regen-btn").click()
    page.wait_for_selector("#chat[data-running=true]")
    wait_idle(page)
    last = "#messages .msg-assistant:last-child"
    wait_position(page, last, "2/2")
    assert page.evaluate("window.stoppedSeen") is False
    assert page.locator(f"#{first_id}").count() == 0
    second_id = page.locator(last).get_attribute("id")
    assert second_id != first_id

    # A second tab of the chat follows the switch.
    other = page.context.new_page()
    other.goto(page.url)
    other.wait_for_selector("#chat[data-connected=true]")
    wait_position(other, last, "2/2")

    page.locator(last).locator(".branch-prev").click()
    wait_position(page, last, "1/2")
    assert page.locator(last).get_attribute("id") == first_id
    assert body(page.locator(last)) == first_text
    wait_position(other, last, "1/2")
    assert other.locator(last).get_attribute("id") == first_id
    other.close()

    # A refresh keeps the choice.
    page.reload()
    page.wait_for_selector("#chat[data-connected=true]")
    wait_position(page, last, "1/2")
    assert body(page.locator(last)) == first_text

    # Editing the question makes a second version of it, answered anew; the first is one click away.
    question = page.locator("#messages .msg-user").first
    question.locator(".edit-btn").click()
    assert "new version" in question.locator(".edit-note").inner_text()
    question.locator(".edit-box textarea").fill("Name a vegetable.")
    watch_for_stopped(page)
    question.locator(".edit-send").click()
    page.wait_for_selector("#chat[data-running=true]")
    wait_idle(page)
    assert page.evaluate("window.stoppedSeen") is False
    first_user = "#messages .msg-user:first-child"
    wait_position(page, first_user, "2/2")
    assert "Name a vegetable." in body(page.locator(first_user))
    assert page.locator("#messages .msg").count() == 2
    assert page.locator(last).locator(".branch-nav").count() == 0  # the new question has one reply
    page.locator(first_user).locator(".branch-prev").click()
    wait_position(page, first_user, "1/2")
    assert "Name a fruit." in body(page.locator(first_user))
    wait_position(page, last, "1/2")  # its thread as last shown: the first reply
    assert page.locator(last).get_attribute("id") == first_id
    page.context.close()


def test_continue_after_a_length_stop(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server)
    set_max_tokens(page, 6)
    send(page, "Write a long story about a cat who sails around the world.")
    wait_idle(page)
    reply = page.locator("#messages .msg-assistant").last
    assert reply.locator(".badge").inner_text() == "max tokens reached"
    reply_id = reply.get_attribute("id")
    before = reply.locator(".msg-raw").input_value()
    tokens_before = int(reply.locator(".msg-stats").inner_text().split()[0])
    reply.locator(".continue-btn").click()
    page.wait_for_selector("#chat[data-running=true]")
    wait_idle(page)
    reply = page.locator(f"#{reply_id}")
    after = reply.locator(".msg-raw").input_value()
    assert after.startswith(before) and len(after) > len(before)
    assert int(reply.locator(".msg-stats").inner_text().split()[0]) > tokens_before
    assert page.locator("#messages .msg-assistant").count() == 1  # the same message grew
    page.context.close()


def test_model_picker_and_what_each_reply_used(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server)
    picker = page.locator("#model-select")
    options = picker.locator("option")
    assert options.first.get_attribute("value") == ""  # the server's default
    loaded = options.nth(1)
    name = loaded.get_attribute("value")
    assert name and re.search(r" · ready \(default\)$", loaded.inner_text())
    picker.select_option(name)
    page.wait_for_function(
        "name => document.getElementById('model-select').value === name"
        " && !document.querySelector('#model-picker.htmx-request')",
        arg=name,
    )
    set_max_tokens(page, 8)
    page.reload()
    page.wait_for_selector("#chat[data-connected=true]")
    assert page.locator("#model-select").input_value() == name  # saved with the chat
    assert page.locator("#set-model").input_value() == name  # and the settings panel agrees

    send(page, "Say hi.")
    wait_idle(page)
    reply = page.locator("#messages .msg-assistant").last
    info = reply.locator(".msg-info")
    assert info.evaluate("n => getComputedStyle(n).opacity") == "0"
    reply.hover()
    page.wait_for_function(
        "() => getComputedStyle(document.querySelector("
        "'#messages .msg-assistant:last-child .msg-info')).opacity === '1'"
    )
    assert info.locator(".msg-model").inner_text() == name
    assert re.search(r"temperature [\d.]+ · top p [\d.]+ · max 8 tokens", info.inner_text())
    time = info.locator("time")
    assert re.match(r"\d{4}-\d\d-\d\dT", time.get_attribute("datetime") or "")
    assert time.get_attribute("title")
    user_time = page.locator("#messages .msg-user").last.locator(".msg-info time")
    assert user_time.get_attribute("datetime")
    # Keyboard users reach it too: focus on the time shows the details.
    page.mouse.move(0, 0)
    user_time.focus()
    page.wait_for_function(
        "() => { const u = document.querySelectorAll('#messages .msg-user');"
        " return getComputedStyle(u[u.length - 1].querySelector('.msg-info')).opacity === '1'; }"
    )
    page.context.close()
