"""Chat goes through the one generation service: console per-user limits hold for chat, a refused send
costs no template work and saves nothing, and a reply's concurrency slot is given back however it ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.chat.wsutil import connected, is_idle, receive_until
from webapp.accounts.models import UserApiLimits
from webapp.chat import services
from webapp.chat.generation import chat_replies
from webapp.chat.models import Conversation, Message
from webapp.core.errors import InvalidRequest, MooncakeError, RateLimited

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def other_chat(alice: User) -> Conversation:
    return services.conversation_create(user=alice)


def _limit(user: User, **limits: int) -> None:
    UserApiLimits.objects.create(user=user, **limits)


async def _completed_replies(chat: Conversation) -> int:
    return await Message.objects.filter(conversation=chat, role="assistant", status="complete").acount()


async def test_console_per_user_limit_holds_for_chat(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    await sync_to_async(_limit)(alice, requests_per_minute=1)
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "one"})
    await receive_until(ws, is_idle)
    await chat_replies().wait_idle()
    templated = fake_engine.template_calls  # the reply's and the title's
    await ws.send_json_to({"type": "send", "content": "two"})
    events = await receive_until(ws, lambda e: e["type"] == "error")
    assert events[-1]["code"] == "rate_limited" and events[-1]["message"]
    assert [m.content async for m in Message.objects.filter(role="user")] == ["one"]
    assert await Message.objects.acount() == 2
    # Refused before any work: no template, no engine request.
    assert fake_engine.template_calls == templated and len(fake_engine.prompts) == 1
    await ws.disconnect()


async def test_refused_send_does_no_template_work(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    replies = chat_replies()
    replies.rate_limit_per_minute = 0
    with pytest.raises(RateLimited) as caught:
        await replies.send(conversation=chat, content="hello")
    assert caught.value.code == "requests_per_minute"
    assert fake_engine.template_calls == 0 and fake_engine.prompts == []
    assert await Message.objects.acount() == 0


async def test_concurrency_slot_is_released_when_a_reply_finishes(
    fake_engine: FakeEngine, alice: User, chat: Conversation, other_chat: Conversation
) -> None:
    await sync_to_async(_limit)(alice, max_concurrent_requests=1)
    fake_engine.hold = asyncio.Event()  # the first reply runs until the second send has been refused
    replies = chat_replies()
    await replies.send(conversation=chat, content="first")
    # While the reply runs, the user's one slot is taken, in any of their chats.
    with pytest.raises(RateLimited) as caught:
        await replies.send(conversation=other_chat, content="meanwhile")
    assert caught.value.code == "concurrent_requests"
    fake_engine.hold.set()
    await replies.wait_idle()
    await replies.send(conversation=other_chat, content="after")
    await replies.wait_idle()
    assert await _completed_replies(other_chat) == 1


async def test_concurrency_slot_is_released_after_stop(
    fake_engine: FakeEngine, alice: User, chat: Conversation, other_chat: Conversation
) -> None:
    await sync_to_async(_limit)(alice, max_concurrent_requests=1)
    fake_engine.delay = 0.05
    fake_engine.reply = " ".join(["word"] * 200)
    replies = chat_replies()
    await replies.send(conversation=chat, content="long")
    running = replies.running(chat.pk)
    async with asyncio.timeout(5):
        while running is not None and not running.message.content:  # streaming has begun
            await asyncio.sleep(0.01)
    assert await replies.stop(chat.pk)
    reply = await Message.objects.filter(conversation=chat, role="assistant").afirst()
    assert reply is not None and reply.status == "stopped" and fake_engine.aborted
    fake_engine.reply, fake_engine.delay = "short", 0.0
    await replies.send(conversation=other_chat, content="after stop")
    await replies.wait_idle()
    assert await _completed_replies(other_chat) == 1


async def test_stop_right_after_send_saves_the_reply_stopped_and_frees_the_slot(
    fake_engine: FakeEngine, alice: User, chat: Conversation, other_chat: Conversation
) -> None:
    await sync_to_async(_limit)(alice, max_concurrent_requests=1)
    replies = chat_replies()
    await replies.send(conversation=chat, content="stop at once")
    assert await replies.stop(chat.pk)  # before the reply's task ran a single step
    reply = await Message.objects.filter(conversation=chat, role="assistant").afirst()
    assert reply is not None and reply.status == "stopped"
    await replies.send(conversation=other_chat, content="next")
    await replies.wait_idle()


async def test_failed_save_releases_the_slot_and_keeps_history_clean(
    monkeypatch: pytest.MonkeyPatch,
    fake_engine: FakeEngine,
    alice: User,
    chat: Conversation,
) -> None:
    await sync_to_async(_limit)(alice, max_concurrent_requests=1)

    def broken(**_: Any) -> Message:
        raise InvalidRequest("cannot save", code="invalid")

    monkeypatch.setattr(services, "user_message_create", broken)
    replies = chat_replies()
    with pytest.raises(MooncakeError):
        await replies.send(conversation=chat, content="hello")
    monkeypatch.undo()
    assert await Message.objects.acount() == 0
    await replies.send(conversation=chat, content="hello again")
    await replies.wait_idle()
    assert await Message.objects.filter(role="assistant", status="complete").acount() == 1


async def test_bad_settings_are_an_invalid_notice(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    # Stored around the services' checks, as an old row or a direct database edit could be.
    await Conversation.objects.filter(pk=chat.pk).aupdate(temperature=-1.0)
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "hello"})
    event = await ws.receive_json_from()
    assert event["type"] == "error" and event["code"] == "invalid"
    assert event["message"].startswith("Check this chat's settings")
    assert await Message.objects.acount() == 0
    await ws.disconnect()
