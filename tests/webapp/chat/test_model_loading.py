"""A chat whose model is not loaded loads it on demand (webapp.chat.model_loading): on a send, every tab shows
"loading…" and the reply follows once the model is ready; a pick starts the load at once; a model that
cannot load is named with the reason, and nothing is saved."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.chat.fakes import FakeManager
from tests.webapp.chat.wsutil import connected, is_idle, receive_until
from webapp.chat.models import Conversation, Message
from webapp.serving import on_demand
from webapp.serving.on_demand import Memory
from webapp.serving.runtime import get_runtime

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]

SHORT = "fake-model is not loaded, and there is not enough memory to load it beside other-model"


@pytest.fixture
def unloaded(fake_manager: FakeManager, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The chat's model registered but not loaded; a start loads it within 0.3 s, as a job (the console's
    load needs the real registry, which tests/webapp/serving/test_on_demand.py drives). The starts made."""
    fake_manager.loaded = False
    starts: list[str] = []

    def start(name: str) -> None:
        starts.append(name)

        def load() -> str:
            fake_manager.loading = True
            time.sleep(0.3)
            fake_manager.loaded, fake_manager.loading = True, False
            return f"{name} loaded"

        get_runtime().jobs.start("load", name, load)

    monkeypatch.setattr(on_demand, "start_everywhere", start)
    monkeypatch.setattr(on_demand, "read_memory", lambda manager, info: Memory(needed=1, free=2))
    return starts


@pytest.fixture
def no_room(fake_manager: FakeManager, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_manager.loaded = False
    monkeypatch.setattr(on_demand, "read_memory", lambda manager, info: Memory(needed=2 << 30, free=1 << 30))
    monkeypatch.setattr(on_demand, "memory_refusal", lambda manager, info, memory: SHORT + ".")
    monkeypatch.setattr(on_demand, "start_everywhere", lambda name: pytest.fail("nothing may load"))


async def test_a_send_loads_the_model_shows_loading_then_replies(
    unloaded: list[str], alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hello while you load", "nonce": "n1"})
    # Shown at once, before the user's message is saved: the socket is not held by the wait.
    assert await ws.receive_json_from(timeout=5) == {"type": "loading", "model": "fake-model", "done": False}
    assert await Message.objects.acount() == 0
    events = await receive_until(ws, is_idle, timeout=20)
    kinds = [e["type"] for e in events]
    done = kinds.index("loading")
    assert events[done]["done"] is True
    assert kinds[done + 1] == "model" and "fake-model · ready" in events[done + 1]["html"]
    saved = next(i for i, e in enumerate(events) if e["type"] == "upsert" and e.get("nonce") == "n1")
    assert saved > done  # the message is saved, and answered, once the model is ready
    reply = await Message.objects.filter(role="assistant").aget()
    assert reply.status == Message.Status.COMPLETE and reply.content
    assert unloaded == ["fake-model"]
    await ws.disconnect()


async def test_a_second_tab_sees_loading_and_two_sends_start_one_load(
    unloaded: list[str], alice: User, chat: Conversation
) -> None:
    first, second = await connected(alice, chat.pk), await connected(alice, chat.pk)
    await first.send_json_to({"type": "send", "content": "one", "nonce": "a"})
    assert (await second.receive_json_from(timeout=5))["type"] == "loading"
    await second.send_json_to({"type": "send", "content": "two", "nonce": "b"})
    await receive_until(first, is_idle, timeout=20)
    await receive_until(second, lambda e: e["type"] == "error" or is_idle(e), timeout=20)
    assert unloaded == ["fake-model"]  # one load for both sends
    await first.disconnect()
    await second.disconnect()


async def test_a_model_that_does_not_fit_is_named_and_nothing_is_saved(
    no_room: None, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hello?"})
    event = await ws.receive_json_from(timeout=5)
    assert event == {"type": "error", "code": "model_unavailable", "message": SHORT + "."}
    assert await Message.objects.acount() == 0
    await ws.disconnect()


def test_picking_a_model_starts_its_load_and_the_picker_follows_it(
    unloaded: list[str], client: Client, alice: User, chat: Conversation
) -> None:
    client.force_login(alice)
    page = client.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    assert "fake-model · not loaded (loads when picked) (default)" in page
    picked = client.post(
        reverse("chat:model", args=[chat.pk]), {"model": "fake-model"}, HTTP_HX_REQUEST="true"
    )
    assert picked.status_code == 200 and unloaded == ["fake-model"]
    deadline = time.monotonic() + 10
    html = picked.content.decode()
    # The picker asks for itself until the load ends.
    while "model-poll" in html and time.monotonic() < deadline:
        assert "loading…" in html or "not loaded" in html
        time.sleep(0.1)
        html = client.get(reverse("chat:model_picker", args=[chat.pk])).content.decode()
    assert "fake-model · ready" in html and "model-poll" not in html


def test_a_pick_that_cannot_load_says_why_in_the_picker_and_the_settings_panel(
    no_room: None, client: Client, alice: User, chat: Conversation
) -> None:
    client.force_login(alice)
    picked = client.post(
        reverse("chat:model", args=[chat.pk]), {"model": "fake-model"}, HTTP_HX_REQUEST="true"
    )
    html = picked.content.decode()
    assert picked.status_code == 200 and 'role="alert"' in html and SHORT in html
    chat.refresh_from_db()
    assert chat.model == "fake-model"  # kept: it loads once an administrator makes room
    client.post(reverse("chat:model", args=[chat.pk]), {"model": ""})
    settings = {"model": "fake-model", "system_prompt": "", "temperature": 0.7, "top_p": 1, "max_tokens": 64}
    panel = client.post(reverse("chat:settings", args=[chat.pk]), settings).content.decode()
    assert 'id="set-model-load"' in panel and SHORT in panel


def test_the_picker_of_someone_elses_chat_is_a_404(client: Client, alice: User, chat: Conversation) -> None:
    client.force_login(User.objects.create_user("bob", password="pw"))
    assert client.get(reverse("chat:model_picker", args=[chat.pk])).status_code == 404
