"""The Edit button of a message goes while its edit box is open, and comes back on Cancel (issue #47: it
stayed visible under the box, a second way into the same edit)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "edit-button", "edit-button-password-1"
CHAT = {"title": "Lighthouses", "messages": [
    {"role": "user", "content": "How tall is a lighthouse?"},
    {"role": "assistant", "content": "Often 20 to 60 metres."},
]}  # fmt: skip


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    """The session's running server: editing needs no server of its own (nor a model until Save & send)."""
    return daphne_server


def test_edit_button_hides_while_editing(browser: Any, server: LiveDaphne) -> None:
    server.create_user(USER, PASSWORD)
    code = (
        "from django.contrib.auth.models import User\n"
        "from webapp.chat.transfer import import_chat\n"
        f"chat = import_chat(user=User.objects.get(username={USER!r}), raw={json.dumps(CHAT).encode()!r})\n"
        "print(chat.pk)\n"
    )
    chat = server.shell(code).strip().splitlines()[-1]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{server.url}/login/?next=/chat/{chat}/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(rf"/chat/{chat}/$"))

    message = page.locator(".msg-user").first
    edit = message.get_by_role("button", name="Edit")
    assert edit.is_visible()
    edit.click()
    page.wait_for_selector(".msg-user .edit-box textarea")
    assert message.locator(".edit-box textarea").input_value() == "How tall is a lighthouse?"
    assert not edit.is_visible()
    assert message.get_by_role("button", name="Save & send").is_visible()

    message.get_by_role("button", name="Cancel").click()
    assert message.locator(".edit-box").count() == 0
    assert edit.is_visible() and message.locator(".user-text").is_visible()
    context.close()
