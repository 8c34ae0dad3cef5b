"""Continue in a new chat, in a real browser: a logged-in reader of a shared chat gets the thread as a chat
of their own, opened and ready to write in, with zero console errors. No model is needed to copy a chat,
so the server starts without loading one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne
from tests.webapp.chat.test_browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

OWNER, READER, PASSWORD = "share-owner", "share-reader", "share-e2e-password-1"
SHARE = f"""
from django.contrib.auth.models import User
from webapp.chat.models import Conversation, Message
from webapp.organize.services import share_create
user = User.objects.get(username={OWNER!r})
chat = Conversation.objects.create(user=user, title="Sourdough", title_is_custom=True)
Message.objects.create(conversation=chat, role="user", content="A sourdough starter schedule?")
Message.objects.create(conversation=chat, role="assistant", content="Feed it **twice** a day.", model="tiny")
print(share_create(conversation=chat)[1])
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    live = start_live_daphne(tmp_path_factory.mktemp("share-continue"), autoload=False)
    try:
        live.create_user(OWNER, PASSWORD)
        live.create_user(READER, PASSWORD)
        yield live
    finally:
        stop_live_daphne(live)


def test_a_reader_continues_a_shared_chat_in_a_new_chat(browser: Any, server: LiveDaphne) -> None:
    token = server.shell(SHARE).strip()
    page = log_in(
        browser, server, username=READER, password=PASSWORD, viewport={"width": 1280, "height": 800}
    )
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server.url}/chat/shared/{token}/")
    assert "Shared by share-owner" in page.inner_text(".shared-head")
    page.click("text=Continue in a new chat")
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    page.wait_for_selector("#chat[data-connected=true]")
    assert page.locator("#messages .msg-user").inner_text().find("A sourdough starter schedule?") >= 0
    assert page.locator("#messages .msg-assistant strong").inner_text() == "twice"
    assert page.input_value("#title-input") == "Sourdough"
    assert page.locator("#conv-list .conv-title", has_text="Sourdough").count() == 1  # the reader's own
    assert page.locator("#composer-input").is_editable()
    assert errors == []
    page.context.close()
