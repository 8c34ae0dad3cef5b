"""Loading a model on demand, end to end: a live Daphne with the bundled model loaded and three more models
registered (as from the console) but not loaded; a real browser sends with one, which loads while the chat
shows "loading…" and then answers, and picks another, which the header's picker follows to "ready"; an API
request names the third, which loads and answers it. Zero console errors throughout."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne
from tests.webapp.chat.test_browser import log_in, set_max_tokens, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "load-on-pick", "load-on-pick-password-1"
EXTRA = ("smol-b", "smol-c", "smol-d")
# Registered as the console registers a model: saved, then taken up by the server's sync, not loaded.
REGISTER = """
from webapp.core.models import ModelRegistration
for name in {names!r}:
    ModelRegistration.objects.get_or_create(name=name, defaults={{"source": "default"}})
"""

SET_MODEL = """
from webapp.chat.models import Conversation
Conversation.objects.filter(pk={chat_id}).update(model={model!r})
"""


def states(server: LiveDaphne) -> dict[str, str]:
    models = json.loads(server.get("/health")[1]).get("models", [])
    return {m["name"]: m["state"] for m in models}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    live = start_live_daphne(tmp_path_factory.mktemp("load-on-pick"))
    try:
        live.create_user(USER, PASSWORD)
        live.shell(REGISTER.format(names=EXTRA))
        deadline = time.monotonic() + 60
        while not all(states(live).get(name) == "available" for name in EXTRA):
            assert time.monotonic() < deadline, f"{states(live)}\n{live.log_tail()}"
            time.sleep(0.5)
        yield live
    finally:
        stop_live_daphne(live)


def watch_errors(page: Any) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def test_a_send_loads_the_chats_model_showing_loading_then_the_reply(
    browser: Any, server: LiveDaphne
) -> None:
    page = log_in(browser, server, username=USER, password=PASSWORD, viewport={"width": 1280, "height": 800})
    errors = watch_errors(page)
    chat_id = int(re.findall(r"/chat/(\d+)/", page.url)[0])
    option = page.locator("#model-select option[value='smol-b']")
    assert option.inner_text() == "smol-b · not loaded (loads when picked)"
    set_max_tokens(page, 8)
    # The chat's model set without a pick (as an older chat's is), so the send is what loads it.
    server.shell(SET_MODEL.format(chat_id=chat_id, model="smol-b"))
    page.reload()
    page.wait_for_selector("#chat[data-connected=true]")
    page.fill("#composer-input", "Say hello.")
    page.press("#composer-input", "Enter")
    note = page.wait_for_selector("#model-loading")
    assert note is not None and note.inner_text().startswith("Loading smol-b")
    assert page.locator("#messages .msg-user").count() == 0  # saved once the model is ready
    page.wait_for_selector("#model-loading", state="detached", timeout=240_000)
    # "Loaded" comes before the message is saved and the reply starts: wait for those, not only for idle.
    page.wait_for_selector("#messages .msg-user", timeout=60_000)
    page.wait_for_selector("#messages .msg-assistant.status-complete", timeout=240_000)
    wait_idle(page)
    assert page.locator("#messages .msg-user").count() == 1
    reply = page.locator("#messages .msg-assistant").last
    assert "status-complete" in (reply.get_attribute("class") or "")
    assert page.locator("#model-select option[value='smol-b']").inner_text() == "smol-b · ready"
    assert states(server)["smol-b"] == "loaded"
    assert errors == []
    page.context.close()


def test_picking_a_model_loads_it_and_the_picker_follows(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, username=USER, password=PASSWORD, viewport={"width": 1280, "height": 800})
    errors = watch_errors(page)
    picker = page.locator("#model-select")
    assert picker.locator("option[value='smol-c']").inner_text() == "smol-c · not loaded (loads when picked)"
    picker.select_option("smol-c")
    page.wait_for_function(
        "() => { const o = document.querySelector(\"#model-select option[value='smol-c']\");"
        " return o && o.textContent.includes('loading'); }"
    )
    page.wait_for_function(
        "() => { const o = document.querySelector(\"#model-select option[value='smol-c']\");"
        " return o && o.textContent.trim() === 'smol-c · ready'; }",
        timeout=240_000,
    )
    assert page.locator("#model-select").input_value() == "smol-c"
    assert states(server)["smol-c"] == "loaded"
    assert errors == []
    page.context.close()


def test_a_message_sent_while_the_pick_is_saving_is_answered_by_the_picked_model(
    browser: Any, server: LiveDaphne
) -> None:
    """The pick is saved by the picker's own request; Enter pressed before that request ends must not
    go out first and be answered by the previous model. The request is held here until after Enter."""
    page = log_in(browser, server, username=USER, password=PASSWORD, viewport={"width": 1280, "height": 800})
    errors = watch_errors(page)
    set_max_tokens(page, 8)
    held: list[Any] = []
    page.route(re.compile(r"/chat/\d+/model/$"), lambda route: held.append(route))
    page.locator("#model-select").select_option("smol-b")
    deadline = time.monotonic() + 30
    while not held:
        assert time.monotonic() < deadline, "the picker sent no request"
        page.wait_for_timeout(50)
    page.fill("#composer-input", "Name a colour.")
    page.press("#composer-input", "Enter")
    page.wait_for_timeout(1500)  # time enough for a send that did not wait to reach the server
    assert page.locator("#messages .msg-user").count() == 0, "the message went out before the pick was saved"
    held[0].continue_()
    page.wait_for_selector("#messages .msg-assistant", timeout=240_000)
    wait_idle(page)
    reply = page.locator("#messages .msg-assistant").last
    assert reply.locator(".msg-role").inner_text().strip() == "smol-b", page.inner_text("#messages")
    assert page.locator("#messages .msg-user").count() == 1
    assert errors == []
    page.context.close()


def test_an_api_request_for_a_registered_model_loads_it_and_is_answered(server: LiveDaphne) -> None:
    assert states(server)["smol-d"] == "available"
    response = httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": "smol-d", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4},
        timeout=240,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "smol-d" and body["choices"][0]["message"]["content"]
    assert states(server)["smol-d"] == "loaded"
