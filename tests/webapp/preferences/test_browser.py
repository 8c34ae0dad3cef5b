"""Defaults, the "/" prompt list and the keyboard shortcuts in a real browser against the live server."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in, send, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PASSWORD = "prefs-e2e-password-1"
ACCOUNT, NEW_PASSWORD = "prefs-account", "prefs-e2e-new-passphrase-2"
CHAT_URL = re.compile(r"/chat/(\d+)/$")


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    for name in ("prefs-defaults", "prefs-prompts", "prefs-keys", "prefs-stop", ACCOUNT):
        daphne_server.create_user(name, PASSWORD)
    # A chat with a message, so it is in the list to be renamed there (no model reply needed).
    daphne_server.shell(
        "from django.contrib.auth.models import User\n"
        "from webapp.chat.models import Conversation, Message\n"
        f"owner = User.objects.get(username={ACCOUNT!r})\n"
        "chat = Conversation.objects.create(user=owner, title='Untitled guess')\n"
        "Message.objects.create(conversation=chat, role='user', content='plan a trip to Lisbon')\n"
    )
    return daphne_server


def login(browser: Any, server: LiveDaphne, username: str, **context_args: Any) -> Any:
    return log_in(browser, server, username=username, password=PASSWORD, **context_args)


def chat_id(page: Any) -> int:
    match = CHAT_URL.search(page.url)
    assert match, page.url
    return int(match.group(1))


def new_chat_by_keyboard(page: Any) -> int:
    before = page.url
    page.keyboard.press("Control+Shift+O")
    page.wait_for_function("(before) => location.href !== before", arg=before)
    page.wait_for_url(CHAT_URL)
    page.wait_for_selector("#chat[data-connected=true]")
    return chat_id(page)


def chat_settings(page: Any) -> tuple[str, str, str]:
    page.click("#settings-toggle")
    values = (
        page.input_value("#set-system"),
        page.input_value("#set-temperature"),
        page.input_value("#set-max-tokens"),
    )
    page.click("#settings-toggle")
    return values


def test_defaults_reach_new_chats(browser: Any, server: LiveDaphne) -> None:
    page = login(browser, server, "prefs-defaults")
    page.click(".topbar a.settings-link")
    page.wait_for_url(re.compile(r"/settings/$"))
    page.fill("#def-system", "You are a pirate. Answer like one.")
    page.fill("#def-temperature", "0.35")
    page.fill("#def-max-tokens", "24")
    page.click("#defaults-form [type=submit]")
    page.wait_for_selector(".toasts >> text=Defaults saved")
    assert page.input_value("#def-temperature") == "0.35"

    # A bad value is refused beside its field and nothing changes.
    page.fill("#def-max-tokens", "999999")
    page.click("#defaults-form [type=submit]")
    page.wait_for_selector("#def-max-tokens-error")
    assert "32768" in page.inner_text("#def-max-tokens-error")
    assert page.evaluate("document.activeElement.id") == "def-max-tokens"

    # The new-chat shortcut works from the settings page too (and from inside a field: it has modifiers).
    new_chat_by_keyboard(page)
    # The empty chat "New chat" reuses took the defaults...
    assert chat_settings(page) == ("You are a pirate. Answer like one.", "0.35", "24")
    send(page, "Say hello.")
    wait_idle(page)
    # ...and so does a chat created from scratch.
    first = chat_id(page)
    second = new_chat_by_keyboard(page)
    assert second != first
    assert chat_settings(page) == ("You are a pirate. Answer like one.", "0.35", "24")
    page.context.close()


def test_prompt_library_in_the_composer(browser: Any, server: LiveDaphne) -> None:
    page = login(browser, server, "prefs-prompts")
    # Every script and style of these pages comes from /static/: the CSP refuses nothing.
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(server.url + "/settings/")
    for title, body in (
        ("Summarise", "Summarise this text in three bullet points:"),
        ("Translate to French", "Translate the following into French:"),
    ):
        page.fill("#prompt-create-title", title)
        page.fill("#prompt-create-body", body)
        page.click("#prompt-create [type=submit]")
        page.wait_for_selector(f".toasts >> text=Prompt “{title}” saved")
    assert page.locator("#prompt-list .prompt-item").count() == 2

    page.goto(server.url + "/chat/")
    page.wait_for_selector("#chat[data-connected=true]")
    composer = page.locator("#composer-input")
    assert composer.get_attribute("role") == "combobox"
    composer.focus()
    page.keyboard.type("/")
    page.wait_for_selector("#prompt-listbox .prompt-option")
    assert composer.get_attribute("aria-expanded") == "true"
    options = page.locator("#prompt-listbox [role=option]")
    assert options.all_inner_texts()[0].startswith("Summarise")
    assert options.count() == 2
    assert options.nth(0).get_attribute("aria-selected") == "true"

    # ↓ moves the active option (announced through aria-activedescendant); Enter inserts it, not sends.
    page.keyboard.press("ArrowDown")
    assert options.nth(1).get_attribute("aria-selected") == "true"
    assert composer.get_attribute("aria-activedescendant") == options.nth(1).get_attribute("id")
    page.keyboard.press("Enter")
    assert composer.input_value() == "Translate the following into French:"
    assert page.locator("#prompt-popup").is_hidden()
    assert composer.get_attribute("aria-expanded") == "false"
    assert page.locator("#messages .msg-user").count() == 0  # Enter inserted; nothing was sent

    # Typing after "/" filters; Tab inserts; ↑ wraps around.
    composer.fill("")
    page.keyboard.type("/sum")
    page.wait_for_function("document.querySelectorAll('#prompt-listbox [role=option]').length === 1")
    page.keyboard.press("Tab")
    assert composer.input_value() == "Summarise this text in three bullet points:"
    assert page.evaluate("document.activeElement.id") == "composer-input"

    # No match says so; Esc closes the list and leaves the text.
    composer.fill("")
    page.keyboard.type("/zzz")
    page.wait_for_selector("#prompt-popup >> text=No prompt matches")
    page.keyboard.press("Escape")
    assert page.locator("#prompt-popup").is_hidden()
    assert composer.input_value() == "/zzz"

    # The mouse works too.
    composer.fill("")
    page.keyboard.type("/")
    page.locator("#prompt-listbox [role=option]", has_text="Translate").click()
    assert composer.input_value() == "Translate the following into French:"
    assert refused == []
    page.context.close()


def test_shortcut_dialog_and_navigation(browser: Any, server: LiveDaphne) -> None:
    page = login(browser, server, "prefs-keys")
    # Two chats with messages, made by hand so the list has somewhere to go.
    first = chat_id(page)
    send(page, "Hi")
    wait_idle(page)
    second = new_chat_by_keyboard(page)
    assert second != first
    send(page, "Hello")
    wait_idle(page)
    assert page.locator("#conv-list .conv-link").count() == 2

    # "?" outside a field opens the dialog, Esc closes it and focus goes back.
    page.focus("#settings-toggle")
    page.keyboard.press("?")
    dialog = page.locator("#shortcuts-dialog")
    dialog.wait_for(state="visible")
    assert page.evaluate("document.getElementById('shortcuts-dialog').open")
    assert "New chat" in dialog.inner_text() and "Copy the last reply" in dialog.inner_text()
    assert page.evaluate("document.activeElement.closest('dialog') !== null")
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    assert page.evaluate("document.activeElement.id") == "settings-toggle"
    # In the message box "?" is just a character.
    page.focus("#composer-input")
    page.keyboard.press("?")
    assert page.input_value("#composer-input") == "?"
    assert dialog.is_hidden()
    page.fill("#composer-input", "")

    # Shift+Esc focuses the message box from anywhere.
    page.focus(".chat-search")
    page.keyboard.press("Shift+Escape")
    assert page.evaluate("document.activeElement.id") == "composer-input"

    # Alt+↓ / Alt+↑ move through the chat list (newest first).
    page.keyboard.press("Alt+ArrowDown")
    page.wait_for_url(re.compile(rf"/chat/{first}/$"))
    page.wait_for_selector("#chat[data-connected=true]")
    page.keyboard.press("Alt+ArrowUp")
    page.wait_for_url(re.compile(rf"/chat/{second}/$"))
    page.wait_for_selector("#chat[data-connected=true]")

    # Ctrl+K goes to the chat search; Ctrl+Shift+O starts a new chat.
    page.keyboard.press("Control+k")
    assert page.evaluate("document.activeElement.classList.contains('chat-search')")
    third = new_chat_by_keyboard(page)
    assert third not in (first, second)
    page.context.close()


def test_stop_and_copy_by_keyboard(browser: Any, server: LiveDaphne) -> None:
    page = login(browser, server, "prefs-stop", permissions=["clipboard-read", "clipboard-write"])
    page.click("#settings-toggle")
    page.fill("#set-max-tokens", "400")
    page.click(".settings-form [type=submit]")
    page.wait_for_selector(".settings-form .saved")
    page.click("#settings-toggle")
    send(page, "Write a very long story about a dragon who loves tea.")
    page.wait_for_function(
        "() => { const b = document.querySelectorAll('#messages .msg-assistant .msg-body');"
        " return b.length && b[b.length - 1].textContent.trim().length > 5; }"
    )
    page.focus("#composer-input")
    page.keyboard.press("Escape")
    wait_idle(page, timeout=30_000)
    last = page.locator("#messages .msg-assistant").last
    assert last.locator(".badge").inner_text() == "stopped"

    # Ctrl+Shift+C copies the last reply's text, and says so.
    page.evaluate("navigator.clipboard.writeText('')")
    page.keyboard.press("Control+Shift+C")
    page.wait_for_selector(".kbd-status >> text=Copied the last reply")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied and copied == last.locator(".msg-raw").input_value()
    page.context.close()


def test_change_password_then_rename_a_chat(browser: Any, server: LiveDaphne) -> None:
    """Settings, Account: a new password logs the other browser out and keeps this one in; then the chat
    list's Rename fixes a title in place, and it lasts."""
    elsewhere = login(browser, server, ACCOUNT)  # another device, signed in before the change
    page = login(browser, server, ACCOUNT)
    page.goto(server.url + "/settings/#account")
    page.fill("#acc-current", "not-my-password")
    page.fill("#acc-new1", NEW_PASSWORD)
    page.fill("#acc-new2", NEW_PASSWORD)
    page.click("#password-form [type=submit]")
    page.wait_for_selector("#acc-current-error")
    assert "not right" in page.inner_text("#acc-current-error")
    assert page.evaluate("document.activeElement.id") == "acc-current"
    assert page.input_value("#acc-new1") == ""  # a password never comes back filled in

    page.fill("#acc-current", PASSWORD)
    page.fill("#acc-new1", NEW_PASSWORD)
    page.fill("#acc-new2", NEW_PASSWORD)
    page.click("#password-form [type=submit]")
    page.wait_for_selector(".toasts >> text=Password changed")
    elsewhere.goto(server.url + "/settings/")
    elsewhere.wait_for_url(re.compile(r"/login/"))
    elsewhere.context.close()

    # Still signed in here: rename the chat from its ⋯ menu in the list.
    page.goto(server.url + "/chat/")
    page.wait_for_selector("#chat[data-connected=true]")
    entry = page.locator("#conv-list .conv-item", has=page.locator(".conv-title", has_text="Untitled guess"))
    entry.hover()
    entry.locator(".conv-menu-button").click()
    entry.locator(".org-rename").click()
    field = page.locator("#conv-list .conv-rename-input")
    field.wait_for()
    assert page.evaluate("document.activeElement.classList.contains('conv-rename-input')")
    # Esc puts the entry back untouched.
    page.keyboard.press("Escape")
    page.wait_for_selector("#conv-list .conv-title >> text=Untitled guess")
    assert page.locator("#conv-list .conv-rename-input").count() == 0

    entry.hover()
    entry.locator(".conv-menu-button").click()
    entry.locator(".org-rename").click()
    field.wait_for()
    field.fill("   ")
    field.press("Enter")
    page.wait_for_selector("#conv-list .conv-rename-error >> text=cannot be blank")
    field.fill("Lisbon trip")
    field.press("Enter")
    page.wait_for_selector("#conv-list .conv-title >> text=Lisbon trip")
    assert page.locator("#conv-list .conv-rename-input").count() == 0
    page.reload()
    page.wait_for_selector("#conv-list .conv-title >> text=Lisbon trip")
    assert page.locator("#conv-list .conv-title", has_text="Untitled guess").count() == 0
    page.context.close()

    # The new password is the one that logs in now.
    login_page = log_in(browser, server, username=ACCOUNT, password=NEW_PASSWORD)
    login_page.context.close()
