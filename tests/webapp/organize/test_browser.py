"""Organising, searching, sharing and rating chats in a real browser against the live server and model."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in, send, set_max_tokens, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OWNER, READER, ADMIN, PASSWORD = "org-owner", "org-reader", "org-admin", "org-e2e-password-1"
DESKTOP = {"width": 1280, "height": 800}
# Older chats with messages, made directly: only the chat under test needs the model.
MAKE_CHATS = f"""
from django.contrib.auth.models import User
from webapp.chat.models import Conversation, Message
user = User.objects.get(username={OWNER!r})
chats = [("Pyramids", "how were the pyramids built"), ("Sourdough", "a sourdough starter schedule")]
for title, text in chats:
    chat = Conversation.objects.create(user=user, title=title, title_is_custom=True)
    Message.objects.create(conversation=chat, role="user", content=text)
    Message.objects.create(conversation=chat, role="assistant", content="Here is how.", model="tiny")
"""


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(OWNER, PASSWORD)
    daphne_server.create_user(READER, PASSWORD)
    daphne_server.create_user(ADMIN, PASSWORD, staff=True)
    daphne_server.shell(MAKE_CHATS)
    return daphne_server


def item(page: Any, title: str) -> Any:
    return page.locator("#conv-list .conv-item", has=page.locator(".conv-title", has_text=title)).first


def open_menu(page: Any, title: str) -> Any:
    entry = item(page, title)
    entry.hover()
    entry.locator(".conv-menu-button").click()
    entry.locator(".conv-menu-items .org-pin").wait_for()
    return entry


def test_organise_search_share_and_rate(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, username=OWNER, password=PASSWORD, viewport=DESKTOP)
    page.on("dialog", lambda dialog: dialog.accept())
    set_max_tokens(page, 8)
    send(page, "Tell me one fact about zebras.")
    wait_idle(page)
    chat_url = page.url
    # A title of our own, so the background title job cannot change it under the test.
    title = "Zebra facts"
    page.fill("#title-input", title)
    page.press("#title-input", "Enter")
    page.wait_for_selector(f"#conv-list .conv-title >> text={title}")
    assert page.locator("#conv-list .conv-item").count() == 3

    # Thumbs down with a comment on the model's reply.
    reply = page.locator("#messages .msg-assistant").last
    reply.locator(".fb-down").click()
    reply.locator(".fb-comment[open] textarea").fill("Too short to be useful.")
    reply.locator(".fb-comment-form [type=submit]").click()
    reply.locator(".fb-saved").wait_for()
    assert reply.locator(".fb-down").get_attribute("aria-pressed") == "true"

    # Pin the oldest chat: it moves to the top, under "Pinned".
    open_menu(page, "Pyramids").locator(".org-pin").click()
    page.wait_for_selector("#org-section-pinned .conv-item")
    first = page.locator("#conv-list .conv-item").first
    assert first.locator(".conv-title").inner_text() == "Pyramids"

    # A folder, made and filled from the keyboard.
    page.click(".org-new-folder > summary")
    page.fill(".org-new-folder input[name=name]", "Baking")
    page.press(".org-new-folder input[name=name]", "Enter")
    page.wait_for_selector(".org-folder-name >> text=Baking")
    entry = item(page, "Sourdough")
    entry.locator(".conv-menu-button").focus()
    page.keyboard.press("Enter")
    target = entry.locator(".org-move-to", has_text="Baking")
    target.wait_for()
    target.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("[id^=org-section-folder-] .conv-item >> text=Sourdough")

    # The chat on screen goes into the folder too, and stays there when a new message bumps it.
    open_menu(page, title).locator(".org-move-to", has_text="Baking").click()
    folder = page.locator("[id^=org-section-folder-]")
    folder.locator(".conv-title", has_text=title).wait_for()
    send(page, "One more, please.")
    wait_idle(page)
    assert folder.locator(".conv-item").first.locator(".conv-title").inner_text() == title
    assert page.locator("#conv-list > .conv-item").count() == 0  # Nothing left loose above the sections.

    # Archive the new chat: it leaves the list, and a word from its messages finds it.
    open_menu(page, title).locator(".org-archive").click()
    page.wait_for_selector("#org-section-archived .conv-item", state="attached")
    assert item(page, title).is_hidden()  # Inside the closed "Archived" section.
    page.fill(".chat-search", "zebras")
    hit = page.locator("#conv-list .search-hit").first
    hit.locator("mark").first.wait_for()
    assert "Archived" in hit.inner_text() and "zebras" in hit.locator("mark").first.inner_text().lower()
    hit.locator("a").click()
    page.wait_for_url(chat_url)
    page.fill(".chat-search", "")

    # Share it, open the link as another user, then revoke it.
    page.click(".org-archived > summary")
    open_menu(page, title).locator(".org-share").click()
    page.wait_for_selector("#share-create")
    page.click("#share-create")
    link = page.input_value("#share-url")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/chat/shared/[\w-]{40,}/", link)
    reader = log_in(browser, server, username=READER, password=PASSWORD, viewport=DESKTOP)
    reader.goto(link)
    assert reader.locator("#shared-title").inner_text() == title
    assert "zebras" in reader.locator(".shared-messages").inner_text()
    assert reader.locator("#composer-input").count() == 0
    anonymous = browser.new_context().new_page()
    anonymous.goto(link)
    assert "/login/" in anonymous.url
    anonymous.context.close()
    page.locator(".org-revoke-form [type=submit]").click()
    page.wait_for_selector("#no-shares")
    assert reader.goto(link).status == 404
    reader.context.close()

    # The admin finds the comment on the console's Feedback page, and reads the chat there.
    admin = log_in(browser, server, username=ADMIN, password=PASSWORD, viewport=DESKTOP)
    admin.goto(server.url + "/console/feedback/?rating=down")
    row = admin.locator(".feedback-row", has_text="Too short to be useful.")
    assert OWNER in row.inner_text()
    row.locator("a").click()
    admin.wait_for_selector(".fb-badge-down")
    assert "zebras" in admin.locator(".shared-messages").inner_text()
    admin.context.close()
    page.context.close()


# After each swap: submit the new-folder form just swapped in, in the very next task (as a quick Enter does).
# Chained on the swaps that creating a folder causes (POSTs) only: a GET the page itself makes as it loads
# (the sidebar) may swap after this is installed and would otherwise start the chain before "First".
SUBMIT_AFTER_SWAP = """(names) => {
  document.body.addEventListener("htmx:afterSwap", function next(event) {
    if (event.detail.requestConfig.verb !== "post") { return; }
    setTimeout(function () {
      const name = names.shift();
      if (name === undefined) { document.body.removeEventListener("htmx:afterSwap", next); return; }
      const form = document.querySelector(".org-new-folder form");
      form.querySelector("input[name=name]").value = name;
      form.requestSubmit();
    }, 0);
  });
}"""


def test_forms_swapped_into_the_list_work_at_once(browser: Any, server: LiveDaphne) -> None:
    """htmx wires up swapped-in content when the swap settles: a form submitted before that went out as a
    plain POST and reloaded the page. Settling at once leaves no such gap."""
    page = log_in(browser, server, username=READER, password=PASSWORD, viewport=DESKTOP)
    page.evaluate("window.sameDocument = true")
    page.evaluate(SUBMIT_AFTER_SWAP, ["Second", "Third"])
    page.click(".org-new-folder > summary")
    page.fill(".org-new-folder input[name=name]", "First")
    page.press(".org-new-folder input[name=name]", "Enter")
    page.wait_for_selector(".org-folder-name >> text=Third")
    names = page.locator(".org-folder-name").all_inner_texts()
    assert sorted(names) == ["First", "Second", "Third"]
    assert page.evaluate("window.sameDocument === true")  # every folder came by htmx, no page load
    page.context.close()
