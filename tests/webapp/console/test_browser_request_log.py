"""End to end with the real model: a chat reply is a request like any other. The user chats, a per-user
limit refuses their next send with a notice in the chat, and staff find both in the console's request log
filtered to the chat (Debian's Chromium via Playwright against a live Daphne)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in as chat_log_in
from tests.webapp.chat.test_browser import send, set_max_tokens, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHATTER, CHATTER_PASSWORD = "log-chatter", "log-chatter-password-1"
STAFF, STAFF_PASSWORD = "log-staff", "log-staff-password-1"


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(CHATTER, CHATTER_PASSWORD)
    daphne_server.create_user(STAFF, STAFF_PASSWORD, staff=True)
    # One request a minute: the first send is it (saving settings is not one), the second is refused.
    daphne_server.shell(
        "from django.contrib.auth.models import User\n"
        "from webapp.accounts.models import UserApiLimits\n"
        f"UserApiLimits.objects.create(user=User.objects.get(username={CHATTER!r}), requests_per_minute=1)\n"
    )
    return daphne_server


def test_chat_reply_and_refusal_appear_in_the_request_log(browser: Any, server: LiveDaphne) -> None:
    chat = chat_log_in(
        browser, server, username=CHATTER, password=CHATTER_PASSWORD, viewport={"width": 1280, "height": 800}
    )
    set_max_tokens(chat, 8)
    send(chat, "Say hi.")
    wait_idle(chat)
    # Over the user's limit: a sentence in the chat, the typed text kept, the composer still usable.
    chat.fill("#composer-input", "And again.")
    chat.press("#composer-input", "Enter")
    notice = chat.locator("#chat-error")
    notice.wait_for(state="visible")
    assert "too quickly" in notice.inner_text()
    assert chat.input_value("#composer-input") == "And again."
    assert chat.locator("#send-btn").is_enabled() and chat.locator("#chat[data-running=false]").count() == 1
    chat.context.close()

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(server.url + f"/login/?next=/console/requests/%3Fsource%3Dchat%26user%3D{CHATTER}")
    page.fill("input[name=username]", STAFF)
    page.fill("input[name=password]", STAFF_PASSWORD)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(rf"/console/requests/\?source=chat&user={CHATTER}$"))
    assert page.locator("select[name=source]").input_value() == "chat"
    rows = page.locator("#request-rows tbody tr")
    # The reply, the title the model wrote for the chat after it (on its own row, not one of the user's
    # requests per minute, so the refusal below is the limit's), and the refused send; the title may land
    # a moment after the refusal.
    for _ in range(60):
        if rows.count() == 3:
            break
        page.wait_for_timeout(500)
        page.reload()
    # Per row: source, user, endpoint, completion tokens, finish reason, status.
    cells = [[row.locator("td").nth(i).inner_text() for i in (1, 2, 4, 6, 9, 10)] for row in rows.all()]
    assert len(cells) == 3, cells
    assert all(source == "Chat" and user.startswith(CHATTER) for source, user, *_ in cells)
    served = {cell[2].split()[0]: cell for cell in cells if cell[5] == "200"}
    assert sorted(served) == ["chat", "chat.title"]
    for *_, completion, finish, _status in served.values():
        assert int(completion) > 0 and finish in ("stop", "length")
    refused = [cell for cell in cells if cell[5].startswith("429")]
    assert len(refused) == 1 and refused[0][2].split()[0] == "chat"
    assert cells.index(refused[0]) < cells.index(served["chat"])  # newest first

    # The API filter hides them; the address carries the filter, so it can be shared.
    page.select_option("select[name=source]", "api")
    page.wait_for_url(re.compile(rf"source=api&.*user={CHATTER}"))
    page.locator("#request-rows", has_text="No requests match.").wait_for()
    context.close()
