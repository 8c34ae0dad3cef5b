"""The chat socket end to end with a fake engine: streaming, persistence, stop, resume, errors, access."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser, User

from inference import PromptTooLongError, QueueFullError
from tests.webapp.chat.fakes import FakeEngine, FakeManager
from tests.webapp.chat.wsutil import connected, is_idle, open_socket, receive_until
from webapp.chat import services
from webapp.chat.generation import chat_replies
from webapp.chat.models import Conversation, Message

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="pw")


async def test_send_streams_saves_and_titles(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hi there", "nonce": "n1"})
    events = await receive_until(ws, is_idle)
    user_event = events[0]
    assert user_event["type"] == "upsert" and user_event["nonce"] == "n1" and "Hi there" in user_event["html"]
    assert {"type": "state", "running": True} in events
    sidebar = next(e for e in events if e["type"] == "conversation")
    assert f'id="conv-{chat.pk}"' in sidebar["html"] and "Hi there" in sidebar["html"]
    final = [e for e in events if e["type"] == "upsert"][-1]
    assert "<strong>bold</strong>" in final["html"]
    assert "&lt;script&gt;" in final["html"] and "<script>" not in final["html"]
    await chat_replies().wait_idle()
    title = await ws.receive_json_from()
    assert title == {"type": "title", "title": "Fake Chat Title"}
    messages = [m async for m in Message.objects.filter(conversation=chat).order_by("id")]
    assert [m.role for m in messages] == ["user", "assistant"]
    reply = messages[1]
    assert reply.status == "complete" and reply.finish_reason == "stop"
    assert reply.content == fake_engine.reply
    assert reply.completion_tokens == len(fake_engine.reply.split(" "))
    assert reply.prompt_tokens and reply.tokens_per_second and reply.model == "fake-model"
    assert "<user>Hi there" in fake_engine.prompts[0]
    await ws.disconnect()


async def test_system_prompt_and_parameters_reach_engine(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    await sync_to_async(services.conversation_update_settings)(
        conversation=chat, system_prompt="Be terse.", model="", temperature=0.2, top_p=0.9, max_tokens=3
    )
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hello"})
    await receive_until(ws, is_idle)
    params = fake_engine.params[0]
    assert (params.temperature, params.top_p, params.max_tokens) == (0.2, 0.9, 3)
    assert fake_engine.prompts[0].startswith("<system>Be terse.")
    reply = await Message.objects.filter(role="assistant").afirst()
    assert reply is not None and reply.finish_reason == "length" and reply.completion_tokens == 3
    await ws.disconnect()


async def test_stop_aborts_on_the_server(fake_engine: FakeEngine, alice: User, chat: Conversation) -> None:
    fake_engine.delay = 0.05
    fake_engine.reply = " ".join(["word"] * 200)
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Long please"})
    await receive_until(ws, lambda e: e["type"] == "upsert" and "word" in e["html"])
    await ws.send_json_to({"type": "stop"})
    events = await receive_until(ws, is_idle, timeout=2.0)
    final = [e for e in events if e["type"] == "upsert"][-1]
    assert "stopped" in final["html"]
    reply = await Message.objects.filter(role="assistant").afirst()
    assert reply is not None and reply.status == "stopped" and reply.finish_reason == "abort"
    assert 0 < (reply.completion_tokens or 0) < 200
    assert fake_engine.aborted
    assert chat_replies().running(chat.pk) is None
    await ws.disconnect()


async def test_reply_survives_socket_close_and_resumes(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    fake_engine.delay = 0.03
    fake_engine.reply = " ".join(f"w{i}" for i in range(60))
    first = await connected(alice, chat.pk)
    await first.send_json_to({"type": "send", "content": "Go"})
    await receive_until(first, lambda e: e["type"] == "upsert" and "w5" in e["html"])
    await first.disconnect()
    await asyncio.sleep(0.6)  # Longer than the save interval: the partial reply is in the database.
    partial = await Message.objects.filter(role="assistant").afirst()
    assert partial is not None and partial.status == "streaming" and partial.content.startswith("w0 w1")
    second = await open_socket(alice, chat.pk)
    assert (await second.connect())[0]
    snapshot = await second.receive_json_from()
    assert snapshot["type"] == "upsert" and "w5" in snapshot["html"]
    assert await second.receive_json_from() == {"type": "state", "running": True}
    events = await receive_until(second, is_idle)
    assert "w59" in [e for e in events if e["type"] == "upsert"][-1]["html"]
    await chat_replies().wait_idle()
    done = await Message.objects.filter(role="assistant").afirst()
    assert done is not None and done.status == "complete" and not fake_engine.aborted
    await second.disconnect()


async def test_two_tabs_both_see_the_stream(fake_engine: FakeEngine, alice: User, chat: Conversation) -> None:
    tab1 = await connected(alice, chat.pk)
    tab2 = await connected(alice, chat.pk)
    await tab1.send_json_to({"type": "send", "content": "Both", "nonce": "mine"})
    events1 = await receive_until(tab1, is_idle)
    events2 = await receive_until(tab2, is_idle)
    assert [e["type"] for e in events1] == [e["type"] for e in events2]
    assert events2[0]["nonce"] == "mine"  # The other tab ignores a nonce it did not send.
    await tab1.disconnect()
    await tab2.disconnect()


async def test_regenerate_keeps_the_old_reply_as_a_version(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Q"})
    await receive_until(ws, is_idle)
    old = await Message.objects.filter(role="assistant").afirst()
    assert old is not None
    fake_engine.reply = "A different answer"
    await ws.send_json_to({"type": "regenerate"})
    events = await receive_until(ws, is_idle)
    thread = next(e for e in events if e["type"] == "thread")
    assert f'id="msg-{old.pk}"' not in thread["html"] and "2/2" in thread["html"]
    replies = [m async for m in Message.objects.filter(role="assistant").order_by("id")]
    assert [r.content for r in replies] == [old.content, "A different answer"]
    assert replies[0].parent_id == replies[1].parent_id
    assert len(fake_engine.prompts) == 2 and fake_engine.prompts[0] == fake_engine.prompts[1]
    await chat_replies().wait_idle()
    await ws.disconnect()


async def test_a_new_version_shows_as_writing_from_its_first_render(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    """The thread sent when Regenerate starts a version shows that version writing, not "stopped": it is
    rendered from a copy of the chat row read before the reply's lease was taken."""
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Q"})
    await receive_until(ws, is_idle)
    await ws.send_json_to({"type": "regenerate"})
    events = await receive_until(ws, is_idle)
    first = next(e for e in events if e["type"] == "thread")["html"]
    assert 'aria-label="Writing"' in first and 'class="badge">stopped<' not in first
    await chat_replies().wait_idle()
    await ws.disconnect()


async def test_edit_adds_a_version_and_answers_it(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    for text in ("first", "second"):
        await ws.send_json_to({"type": "send", "content": text})
        await receive_until(ws, is_idle)
    first = await Message.objects.filter(role="user").order_by("id").afirst()
    assert first is not None
    await ws.send_json_to({"type": "edit", "message_id": first.pk, "content": "first, edited", "nonce": "e"})
    events = await receive_until(ws, is_idle)
    thread = next(e for e in events if e["type"] == "thread")
    assert thread["nonce"] == "e" and "first, edited" in thread["html"] and "second" not in thread["html"]
    assert await Message.objects.acount() == 6  # nothing was deleted
    edited = await Message.objects.filter(content="first, edited").aget()
    assert edited.parent_id is None and first.parent_id is None
    assert "second" not in fake_engine.prompts[-1] and "<user>first, edited" in fake_engine.prompts[-1]
    await chat_replies().wait_idle()
    await ws.disconnect()


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        ("too_long", "context_too_long"),
        ("no_model", "no_model"),
        ("failed", "model_unavailable"),
        ("loading", "model_loading"),
        ("downloading", "model_loading"),
        ("unknown_model", "unknown_model"),
    ],
)
async def test_errors_before_saving_keep_history_clean(
    fake_manager: FakeManager, alice: User, chat: Conversation, setup: str, code: str, settings: Any
) -> None:
    if setup == "too_long":
        fake_manager.engine.max_model_len = 20
    elif setup == "no_model":  # no model is set up at all
        fake_manager.default_name = None  # type: ignore[assignment]
    elif setup == "failed":
        fake_manager.loaded, fake_manager.failed = False, "RuntimeError: bad file"
    elif setup in ("loading", "downloading"):
        fake_manager.loaded, fake_manager.loading = False, setup == "loading"
        fake_manager.downloading = setup == "downloading"
        # No wait for the load (webapp.serving.model_wait): the refusal past the bound is what is shown.
        settings.MOONCAKE = {
            **settings.MOONCAKE,
            "model": {**settings.MOONCAKE["model"], "load_wait_seconds": 0},
        }
    else:
        chat.model = "gone"
        await chat.asave()
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hello, is this too long for you?"})
    event = await ws.receive_json_from(timeout=10)
    if setup in ("loading", "downloading"):  # the chat says the model loads, then that it is taking long
        assert event == {"type": "loading", "model": "fake-model", "done": False}
        while event["type"] != "error":
            event = await ws.receive_json_from()
    assert event["type"] == "error" and event["code"] == code and event["message"]
    assert await Message.objects.acount() == 0
    await ws.disconnect()


async def test_engine_refusal_after_start_shows_inline(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    fake_engine.fail_with = QueueFullError("queue full")
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hi"})
    events = await receive_until(ws, is_idle)
    final = [e for e in events if e["type"] == "upsert"][-1]
    assert "server is busy" in final["html"]
    reply = await Message.objects.filter(role="assistant").afirst()
    assert reply is not None and reply.status == "error" and reply.finish_reason == "error"
    await ws.disconnect()


async def test_error_mid_stream_keeps_partial_text(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    fake_engine.fail_with, fake_engine.fail_after = PromptTooLongError("nope"), 2
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hi"})
    await receive_until(ws, is_idle)
    reply = await Message.objects.filter(role="assistant").afirst()
    assert reply is not None and reply.status == "error" and reply.content.startswith("Hello there!")
    await ws.disconnect()


async def test_busy_and_rate_limited(fake_engine: FakeEngine, alice: User, chat: Conversation) -> None:
    fake_engine.delay = 0.05
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "one"})
    await receive_until(ws, lambda e: e == {"type": "state", "running": True})
    await ws.send_json_to({"type": "send", "content": "two"})
    events = await receive_until(ws, lambda e: e["type"] == "error")
    assert events[-1]["code"] == "busy"
    await receive_until(ws, is_idle)
    chat_replies().rate_limit_per_minute = 1
    await ws.send_json_to({"type": "send", "content": "three"})
    events = await receive_until(ws, lambda e: e["type"] == "error")
    assert events[-1]["code"] == "rate_limited"
    assert await Message.objects.filter(role="user").acount() == 1
    await chat_replies().wait_idle()
    await ws.disconnect()


async def test_bad_input_is_an_error_not_a_crash(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    for payload, code in [
        ({"type": "send", "content": "   "}, "invalid"),
        ({"type": "dance"}, "invalid"),
        ({"type": "edit", "message_id": "x", "content": "y"}, "invalid"),
        ({"type": "regenerate"}, "invalid"),
    ]:
        await ws.send_json_to(payload)
        event = await ws.receive_json_from()
        assert (event["type"], event["code"]) == ("error", code), payload
    await ws.send_json_to(["not", "an", "object"])
    assert (await ws.receive_json_from())["type"] == "error"
    await ws.disconnect()


async def test_anonymous_is_rejected(fake_engine: FakeEngine, chat: Conversation) -> None:
    communicator = await open_socket(AnonymousUser(), chat.pk)
    ok, code = await communicator.connect()
    assert not ok and code == 4401


async def test_foreign_origin_is_rejected(fake_engine: FakeEngine, alice: User, chat: Conversation) -> None:
    communicator = await open_socket(alice, chat.pk, origin=b"https://evil.example")
    ok, _ = await communicator.connect()
    assert not ok


async def test_other_users_chat_is_invisible_over_socket(
    fake_engine: FakeEngine, bob: User, chat: Conversation
) -> None:
    communicator = await open_socket(bob, chat.pk)
    ok, code = await communicator.connect()
    assert not ok and code == 4404
    missing = await open_socket(bob, 999_999)
    assert (await missing.connect()) == (False, 4404)


async def test_edit_of_another_chats_message_is_refused(
    fake_engine: FakeEngine, alice: User, bob: User, chat: Conversation
) -> None:
    bobs = await sync_to_async(services.conversation_create)(user=bob)
    bobs_message = await sync_to_async(services.user_message_create)(conversation=bobs, content="private")
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "edit", "message_id": bobs_message.pk, "content": "hijack"})
    event = await ws.receive_json_from()
    assert event["type"] == "error"
    await bobs_message.arefresh_from_db()
    assert bobs_message.content == "private"
    await ws.disconnect()


async def test_deleting_a_chat_mid_reply_stops_it(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    fake_engine.delay = 0.05
    fake_engine.reply = " ".join(["word"] * 200)
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Long please"})
    await receive_until(ws, lambda e: e["type"] == "upsert" and "word" in e["html"])
    await sync_to_async(services.conversation_delete)(conversation=chat)
    await receive_until(ws, is_idle, timeout=3.0)
    assert fake_engine.aborted
    assert chat_replies().running(chat.pk) is None
    assert await Message.objects.acount() == 0
    await ws.send_json_to({"type": "send", "content": "still there?"})
    assert (await ws.receive_json_from())["code"] == "not_found"
    await ws.disconnect()
