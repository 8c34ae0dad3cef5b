"""Reply versions over the chat socket (fake engine): regenerate and edit add branches, switching is saved
and shown in every tab, the prompt is the thread on screen, Continue extends a reply cut at its limit."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.chat.wsutil import connected, is_idle, receive_until
from webapp.accounts.models import RequestLog
from webapp.chat import selectors, services
from webapp.chat.generation import chat_replies
from webapp.chat.models import Conversation, Message

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="pw")


async def _path(chat: Conversation) -> list[Message]:
    return await sync_to_async(selectors.conversation_messages)(conversation=chat)


async def _replies(chat: Conversation) -> list[Message]:
    return [m async for m in Message.objects.filter(conversation=chat, role="assistant").order_by("id")]


async def test_switching_versions_is_saved_shared_and_steers_the_prompt(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    tab, other = await connected(alice, chat.pk), await connected(alice, chat.pk)
    fake_engine.reply = "First answer"
    await tab.send_json_to({"type": "send", "content": "Question"})
    await receive_until(tab, is_idle)
    fake_engine.reply = "Second answer"
    await tab.send_json_to({"type": "regenerate"})
    await receive_until(tab, is_idle)
    first, second = await _replies(chat)
    assert [m.content for m in await _path(chat)] == ["Question", "Second answer"]
    assert (await _path(chat))[-1].branch.index == 2

    await tab.send_json_to({"type": "switch", "message_id": first.pk})
    mine = (await receive_until(tab, lambda e: e["type"] == "thread"))[-1]
    # The other tab saw the regenerated thread first, then this one.
    theirs = (await receive_until(other, lambda e: e["type"] == "thread" and "1/2" in e["html"]))[-1]
    assert mine == theirs and "First answer" in mine["html"] and "Second answer" not in mine["html"]
    assert "1/2" in mine["html"] and f'data-target="{second.pk}"' in mine["html"]
    # A reload (a fresh read) shows the same choice.
    path = await _path(await Conversation.objects.aget(pk=chat.pk))
    assert [m.content for m in path] == ["Question", "First answer"] and path[-1].branch.count == 2

    # The next message goes under the version on screen, and its prompt holds that version only.
    fake_engine.reply = "Follow-up answer"
    await tab.send_json_to({"type": "send", "content": "And then?"})
    await receive_until(tab, is_idle)
    assert "First answer" in fake_engine.prompts[-1] and "Second answer" not in fake_engine.prompts[-1]
    follow = await Message.objects.aget(content="And then?")
    assert follow.parent_id == first.pk
    # Switching to the other version shows its own (empty) continuation; back again, the follow-up.
    await tab.send_json_to({"type": "switch", "message_id": second.pk})
    await receive_until(tab, lambda e: e["type"] == "thread")
    assert [m.content for m in await _path(chat)] == ["Question", "Second answer"]
    await tab.send_json_to({"type": "switch", "message_id": first.pk})
    await receive_until(tab, lambda e: e["type"] == "thread")
    assert [m.content for m in await _path(chat)][-2:] == ["And then?", "Follow-up answer"]
    await chat_replies().wait_idle()
    await tab.disconnect()
    await other.disconnect()


async def test_regenerating_an_earlier_reply_uses_the_thread_up_to_it(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    for text in ("one", "two"):
        await ws.send_json_to({"type": "send", "content": text})
        await receive_until(ws, is_idle)
    early = (await _replies(chat))[0]
    await ws.send_json_to({"type": "regenerate", "message_id": early.pk})
    await receive_until(ws, is_idle)
    assert "two" not in fake_engine.prompts[-1] and fake_engine.prompts[-1].endswith("<user>one<assistant>")
    newest = (await _replies(chat))[-1]
    assert newest.parent_id == early.parent_id
    assert [m.pk for m in await _path(chat)][-1] == newest.pk
    # The reply records the model and the sampling settings it was written with.
    assert (newest.model, newest.temperature, newest.top_p, newest.max_tokens) == (
        "fake-model",
        chat.temperature,
        chat.top_p,
        chat.max_tokens,
    )
    await chat_replies().wait_idle()
    await ws.disconnect()


async def test_other_chats_ids_and_bad_ids_are_refused(
    fake_engine: FakeEngine, alice: User, bob: User, chat: Conversation
) -> None:
    bobs = await sync_to_async(services.conversation_create)(user=bob)
    private = await sync_to_async(services.user_message_create)(conversation=bobs, content="private")
    ws = await connected(alice, chat.pk)
    for action in ("switch", "regenerate", "continue", "edit"):
        await ws.send_json_to({"type": action, "message_id": private.pk, "content": "x"})
        event = await ws.receive_json_from()
        assert (event["type"], event["code"]) == ("error", "not_found"), action
    for bad in ("x", None, True, 1.5, -3, 2**70, [1]):
        await ws.send_json_to({"type": "switch", "message_id": bad})
        event = await ws.receive_json_from()
        assert (event["type"], event["code"]) == ("error", "invalid"), bad
    assert await Message.objects.filter(conversation=chat).acount() == 0
    bobs_path = await sync_to_async(selectors.active_path)(conversation=bobs)
    assert [m.pk for m in bobs_path] == [private.pk]
    await ws.disconnect()


async def test_switching_waits_for_the_running_reply(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Q"})
    await receive_until(ws, is_idle)
    fake_engine.delay, fake_engine.reply = 0.05, " ".join(["word"] * 60)
    await ws.send_json_to({"type": "regenerate"})
    await receive_until(ws, lambda e: e == {"type": "state", "running": True})
    first = (await _replies(chat))[0]
    await ws.send_json_to({"type": "switch", "message_id": first.pk})
    event = await receive_until(ws, lambda e: e["type"] == "error")
    assert event[-1]["code"] == "busy"
    await ws.send_json_to({"type": "stop"})
    await receive_until(ws, is_idle)
    assert (await _path(chat))[-1].pk != first.pk
    await ws.disconnect()


async def test_continue_extends_a_reply_cut_at_its_length_limit(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    await sync_to_async(services.conversation_update_settings)(
        conversation=chat, system_prompt="", model=None, temperature=0.3, top_p=0.8, max_tokens=3
    )
    fake_engine.reply = "one two three four five six seven"
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Count"})
    events = await receive_until(ws, is_idle)
    final = [e for e in events if e["type"] == "upsert"][-1]
    assert "continue-btn" in final["html"] and "max tokens reached" in final["html"]
    reply = (await _replies(chat))[0]
    assert reply.finish_reason == "length" and reply.content == "one two three "
    # The chat's settings change; Continue keeps the ones the reply was written with.
    await sync_to_async(services.conversation_update_settings)(
        conversation=chat, system_prompt="", model=None, temperature=1.5, top_p=0.5, max_tokens=200
    )
    logged = await RequestLog.objects.filter(endpoint="chat").acount()  # replies, not titles
    fake_engine.reply = "four five six seven"
    await ws.send_json_to({"type": "continue", "message_id": reply.pk})
    events = await receive_until(ws, is_idle)
    # The prompt ends inside the assistant's turn, with the text so far: no new turn is opened.
    assert fake_engine.prompts[-1].endswith("<user>Count<assistant>one two three ")
    params = fake_engine.params[-1]
    assert (params.temperature, params.top_p, params.max_tokens) == (0.3, 0.8, 3)
    await reply.arefresh_from_db()
    assert reply.content == "one two three four five six "
    assert reply.completion_tokens == 6 and reply.status == "complete" and reply.finish_reason == "length"
    assert await Message.objects.filter(conversation=chat).acount() == 2  # the same message grew
    assert not any(e["type"] == "thread" for e in events)
    assert await RequestLog.objects.filter(endpoint="chat").acount() == logged + 1  # its own request
    await chat_replies().wait_idle()

    # A reply that finished, or one with something after it, is not continued.
    fake_engine.reply = "done"
    await ws.send_json_to({"type": "send", "content": "More"})
    await receive_until(ws, is_idle)
    for target in (reply, (await _replies(chat))[-1]):
        await ws.send_json_to({"type": "continue", "message_id": target.pk})
        event = await ws.receive_json_from()
        assert (event["type"], event["code"]) == ("error", "invalid")
        assert "length limit" in event["message"]
    await chat_replies().wait_idle()
    await ws.disconnect()


async def test_edit_of_the_first_message_makes_a_second_first_version(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "Hi"})
    await receive_until(ws, is_idle)
    first = await Message.objects.aget(content="Hi")
    await ws.send_json_to({"type": "edit", "message_id": first.pk, "content": "Hello", "nonce": "n"})
    await receive_until(ws, is_idle)
    path = await _path(chat)
    assert path[0].content == "Hello" and path[0].branch.index == 2
    assert fake_engine.prompts[-1] == "<user>Hello<assistant>"
    await ws.send_json_to({"type": "switch", "message_id": first.pk})
    await receive_until(ws, lambda e: e["type"] == "thread")
    assert [m.content for m in await _path(chat)] == ["Hi", fake_engine.reply]
    await chat_replies().wait_idle()
    await ws.disconnect()
