"""The chat in a real browser (Debian's Chromium via Playwright) against a live Daphne and the real model.

Set MOONCAKE_SCREENSHOTS=1 to (re)write the screenshots in docs/screenshots/.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SCREENSHOTS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"
USER, PASSWORD = "chat-e2e", "chat-e2e-password-1"
# Records every length the newest reply has shown, to prove it grows in steps rather than at once.
WATCH_GROWTH = """() => {
  window.__lengths = [];
  new MutationObserver(() => {
    const bodies = document.querySelectorAll('#messages .msg-assistant .msg-body');
    if (bodies.length) window.__lengths.push(bodies[bodies.length - 1].textContent.length);
  }).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
}"""


def shot(page: Any, name: str) -> None:
    if os.environ.get("MOONCAKE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / name))


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD)
    return daphne_server


def log_in(
    browser: Any, server: LiveDaphne, *, username: str = USER, password: str = PASSWORD, **context_args: Any
) -> Any:
    context = browser.new_context(**context_args)
    context.set_default_timeout(120_000)  # The CI box may be busy.
    page = context.new_page()
    page.goto(server.url + "/login/?next=/chat/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    page.wait_for_selector("#chat[data-connected=true]")
    return page


def send(page: Any, text: str) -> None:
    page.fill("#composer-input", text)
    page.press("#composer-input", "Enter")
    page.wait_for_selector("#chat[data-running=true]")


def wait_idle(page: Any, timeout: float = 240_000) -> None:
    page.wait_for_selector("#chat[data-running=false]", timeout=timeout)


def set_max_tokens(page: Any, value: int) -> None:
    page.click("#settings-toggle")
    page.fill("#set-max-tokens", str(value))
    page.click(".settings-form [type=submit]")
    page.wait_for_selector(".settings-form .saved")
    page.click("#settings-toggle")


def test_chat_in_a_real_browser(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, viewport={"width": 1280, "height": 800})
    shot(page, "chat-empty.png")
    set_max_tokens(page, 32)

    # Send with Enter; the reply streams in visibly growing steps and ends with its stats.
    page.evaluate(WATCH_GROWTH)
    send(page, "Tell me three facts about the moon.")
    page.wait_for_selector("#messages .msg-user >> text=three facts about the moon")
    assert page.input_value("#composer-input") == ""
    assert page.locator("#conv-list .conv-item.current").count() == 1  # The new chat joined the list.
    assert page.input_value("#title-input") != "New chat"  # Provisional title now, the model's soon.
    wait_idle(page)
    lengths = [n for n in page.evaluate("window.__lengths") if n > 0]
    assert len(set(lengths)) >= 2, lengths
    reply = page.locator("#messages .msg-assistant").last
    assert re.search(r"\d+ tokens? · prompt \d+ · [\d.]+ tok/s", reply.locator(".msg-stats").inner_text())
    shot(page, "chat-light.png")

    # Stop mid-stream with the Stop button, then with Esc: the server aborts and saves "stopped".
    set_max_tokens(page, 400)
    for how in ("button", "escape"):
        send(page, "Write a very long story about a dragon who loves tea.")
        page.wait_for_function(
            "() => { const b = document.querySelectorAll('#messages .msg-assistant .msg-body');"
            " return b.length && b[b.length - 1].textContent.trim().length > 5; }"
        )
        if how == "button":
            page.click("#stop-btn")
        else:
            page.keyboard.press("Escape")
        wait_idle(page, timeout=30_000)
        last = page.locator("#messages .msg-assistant").last
        assert last.locator(".badge").inner_text() == "stopped"

    # Reload: the history is all there, rendered from the database.
    page.reload()
    page.wait_for_selector("#chat[data-connected=true]")
    assert page.locator("#messages .msg-user").count() == 3
    assert page.locator("#messages .msg-assistant .badge", has_text="stopped").count() == 2
    assert page.locator("#conv-list .conv-item.current").count() == 1

    # Search covers message content (htmx swaps the list as you type).
    page.fill(".chat-search", "no-such-words-anywhere")
    page.wait_for_selector("#conv-list .conv-empty")
    page.fill(".chat-search", "dragon who loves tea")
    page.wait_for_selector("#conv-list .conv-item.current")
    page.fill(".chat-search", "")

    # Edit the first message and resend: a new version of it, with a new reply, replaces the thread shown.
    set_max_tokens(page, 16)
    first = page.locator("#messages .msg-user").first
    first.locator(".edit-btn").click()
    assert "new version" in first.locator(".edit-note").inner_text()
    first.locator(".edit-box textarea").fill("Tell me two facts about Mars.")
    first.locator(".edit-send").click()
    page.wait_for_selector("#chat[data-running=true]")
    wait_idle(page)
    assert page.locator("#messages .msg").count() == 2
    assert "two facts about Mars" in page.locator("#messages .msg-user").first.inner_text()

    # Regenerate shows a new version of the last reply in its place.
    old_id = page.locator("#messages .msg-assistant").last.get_attribute("id")
    page.locator("#messages .msg-assistant").last.locator(".regen-btn").click()
    page.wait_for_selector("#chat[data-running=true]")
    wait_idle(page)
    assert page.locator(f"#{old_id}").count() == 0
    assert page.locator("#messages .msg-assistant").count() == 1
    assert page.locator("#messages .msg-assistant").last.locator(".msg-stats").count() == 1

    # Dark mode toggles from the top bar and sticks across a reload.
    assert page.evaluate("document.documentElement.dataset.theme") == "auto"  # Follows the system.
    page.click("#theme-toggle")  # Headless Chromium's system theme is light, so the first click goes dark.
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(21, 23, 26)"
    page.click("#settings-toggle")
    shot(page, "chat-dark-settings.png")
    page.click("#settings-toggle")
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    shot(page, "chat-dark.png")

    # Delete asks first, then leaves for a fresh chat.
    deleted_url = page.url
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(".chat-menu summary")
    page.click(".chat-menu-items .danger-link")
    page.wait_for_url(lambda url: url != deleted_url and re.search(r"/chat/\d+/$", url) is not None)
    assert page.locator("#messages .msg").count() == 0
    response = page.goto(deleted_url)
    assert response is not None and response.status == 404
    page.context.close()


def test_phone_sized_viewport(browser: Any, server: LiveDaphne) -> None:
    page = log_in(
        browser,
        server,
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        has_touch=True,
        color_scheme="dark",
    )
    # No stored choice: the theme follows the system setting, dark here.
    assert page.evaluate("document.documentElement.dataset.theme") == "auto"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(21, 23, 26)"
    set_max_tokens(page, 12)
    send(page, "Say hello in French.")
    wait_idle(page)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    assert page.locator("#chat-sidebar").is_hidden()
    composer = page.locator("#composer-input").bounding_box()
    assert composer is not None and composer["x"] >= 0 and composer["x"] + composer["width"] <= 390
    assert composer["y"] + composer["height"] <= 844
    shot(page, "chat-mobile.png")
    page.click("#sidebar-toggle")
    assert page.locator("#chat-sidebar").is_visible()
    assert page.locator("#conv-list .conv-item").count() >= 1
    shot(page, "chat-mobile-sidebar.png")
    page.context.close()


MAKE_CHATS = f"""
from django.contrib.auth.models import User
from webapp.chat import services
user = User.objects.get(username={USER!r})
for i in range(32):
    chat = services.conversation_create(user=user)
    services.user_message_create(conversation=chat, content=f"filler chat {{i}}")
"""

IMPORTED = {
    "format": "mooncake.chat",
    "version": 1,
    "title": "Imported markdown showcase",
    "messages": [
        {"role": "user", "content": "Show me a Python function and a table. <b>not bold</b>"},
        {
            "role": "assistant",
            "content": (
                "Here is **Markdown** from the model:\n\n```python\ndef greet(name: str) -> str:\n"
                '    return f"Hello, {name}!"\n```\n\n| Planet | Moons |\n|---|---:|\n| Earth | 1 |\n'
                "| Mars | 2 |\n\n<script>window.__pwned = 1</script> stays text."
            ),
            "completion_tokens": 64,
            "prompt_tokens": 20,
            "tokens_per_second": 30.5,
            "finish_reason": "stop",
        },
    ],
}


def test_import_renders_markdown_safely_with_copy_buttons(
    browser: Any, server: LiveDaphne, tmp_path: Path
) -> None:
    export = tmp_path / "chat.json"
    export.write_text(json.dumps(IMPORTED), encoding="utf-8")
    server.shell(MAKE_CHATS)
    page = log_in(browser, server, viewport={"width": 1280, "height": 800})

    # The sidebar loads older chats as it scrolls (htmx, 30 a page).
    assert page.locator("#conv-list .conv-item").count() == 30
    page.locator("#conv-list .conv-more").scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelectorAll('#conv-list .conv-item').length > 30")

    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.click(".chat-import summary")
    page.set_input_files(".chat-import input[type=file]", str(export))
    page.click(".chat-import [type=submit]")
    page.wait_for_selector("#messages .code-block")
    assert page.input_value("#title-input") == "Imported markdown showcase"
    reply = page.locator("#messages .msg-assistant")
    assert reply.locator("strong").inner_text() == "Markdown"
    assert reply.locator("table tr").count() == 3
    assert "<script>window.__pwned = 1</script> stays text." in reply.inner_text()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#messages .msg-user b").count() == 0
    page.click(".copy-btn")
    page.wait_for_selector(".copy-btn:text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()").startswith("def greet(name: str)")
    shot(page, "chat-markdown.png")
    page.context.close()
