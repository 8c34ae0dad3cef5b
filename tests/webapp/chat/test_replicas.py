"""A chat reply belongs to the conversation, not to a process: two ChatReplies stand in for two replicas,
sharing the database and the channel layer (in memory, and Redis as replicas use it)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.models import User
from django.utils import timezone

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.chat.wsutil import open_socket, receive_until
from webapp.chat import events, leases, replicas, selectors, services
from webapp.chat.generation import ChatReplies, chat_replies
from webapp.chat.models import Conversation, Message
from webapp.core.errors import Conflict

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


@pytest.fixture(params=["memory", "redis"])
async def layer(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    if request.param == "redis":
        request.getfixturevalue("redis_channel_layer")
    yield request.param


@pytest.fixture
def chat() -> Conversation:
    user = User.objects.create_user("alice", password="pw-123456789")
    return services.conversation_create(user=user)


def slow(engine: FakeEngine) -> None:
    engine.delay = 0.02
    engine.reply = " ".join(["word"] * 400)


async def fresh(chat: Conversation) -> Conversation:
    return await Conversation.objects.aget(pk=chat.pk)


async def until(predicate: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.02)


async def test_a_second_send_is_refused_on_another_replica(
    layer: str, fake_engine: FakeEngine, chat: Conversation
) -> None:
    slow(fake_engine)
    here, elsewhere = chat_replies(), ChatReplies()
    await here.send(conversation=chat, content="first")
    with pytest.raises(Conflict) as info:
        await elsewhere.send(conversation=await fresh(chat), content="second")
    assert info.value.code == "busy"
    assert await Message.objects.filter(role="user").acount() == 1  # the refused send saved nothing
    await here.stop(chat.pk)
    await here.wait_idle()


async def test_stop_on_another_replica_stops_the_reply(
    layer: str, fake_engine: FakeEngine, chat: Conversation
) -> None:
    slow(fake_engine)
    running, other = ChatReplies(), chat_replies()
    await running.send(conversation=chat, content="go")
    await until(lambda: Message.objects.filter(role="assistant", content__contains="word").aexists())
    assert other.running(chat.pk) is None
    await other.stop(chat.pk)  # sent through the channel layer to the replica running it
    await asyncio.wait_for(running.wait_idle(), 20)  # a hang guard: a loaded 2-core CI box is slow
    reply = await Message.objects.aget(role="assistant")
    assert reply.status == Message.Status.STOPPED and reply.finish_reason == "abort"
    assert fake_engine.aborted and (await fresh(chat)).reply_lease_until is None
    # The chat is free again on every replica.
    fake_engine.delay, fake_engine.reply = 0.0, "Done."
    await other.send(conversation=await fresh(chat), content="again")
    await other.wait_idle()


def lose_stops(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The channel layer delivers at most once: channels_redis drops what it sends to a process whose
    backlog is at capacity. This layer loses every stop, and returns what it lost."""
    layer = get_channel_layer()
    send = layer.group_send
    lost: list[dict[str, Any]] = []

    async def lossy(group: str, message: dict[str, Any]) -> None:
        if message.get("type") == replicas.STOP:
            lost.append(message)
        else:
            await send(group, message)

    monkeypatch.setattr(layer, "group_send", lossy)
    return lost


async def test_a_stop_the_channel_layer_loses_still_stops_the_reply(
    layer: str, fake_engine: FakeEngine, chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow(fake_engine)  # 400 words over 8 s
    running, other = ChatReplies(), chat_replies()
    await running.send(conversation=chat, content="go")
    await until(lambda: Message.objects.filter(role="assistant", content__contains="word").aexists())
    lost = lose_stops(monkeypatch)
    pressed = time.monotonic()
    await other.stop(chat.pk)
    await asyncio.wait_for(running.wait_idle(), 20)
    assert lost == [{"type": replicas.STOP, "id": chat.pk}]
    # Read from the row at the reply's next save (every SAVE_INTERVAL_S), long before its 8 s end.
    assert time.monotonic() - pressed < 4.0
    reply = await Message.objects.aget(role="assistant")
    assert reply.status == Message.Status.STOPPED and reply.finish_reason == "abort"
    assert 0 < reply.content.count("word") < 400 and fake_engine.aborted
    after = await fresh(chat)
    assert after.reply_lease_until is None and not after.reply_stop_requested
    # The next reply is not stopped by the old request.
    fake_engine.delay, fake_engine.reply = 0.0, "Done."
    await other.send(conversation=after, content="again")
    await other.wait_idle()
    assert await Message.objects.filter(role="assistant", status=Message.Status.COMPLETE).acount() == 1


async def test_a_lost_stop_reaches_a_reply_that_has_not_saved_yet_at_its_lease_renewal(
    layer: str, fake_engine: FakeEngine, chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_engine.delay = 30.0  # no first token, so no save, for 30 s: as a reply queued behind others
    monkeypatch.setattr(leases, "RENEW_S", 0.1)
    running, other = ChatReplies(), chat_replies()
    await running.send(conversation=chat, content="go")
    lost = lose_stops(monkeypatch)
    await other.stop(chat.pk)
    await asyncio.wait_for(running.wait_idle(), 5)
    assert lost and fake_engine.aborted
    reply = await Message.objects.aget(role="assistant")
    assert reply.status == Message.Status.STOPPED and reply.finish_reason == "abort"


async def test_stop_when_no_reply_runs_anywhere_leaves_no_request_behind(
    layer: str, fake_engine: FakeEngine, chat: Conversation
) -> None:
    await chat_replies().stop(chat.pk)
    assert not (await fresh(chat)).reply_stop_requested
    fake_engine.reply = "Done."
    await chat_replies().send(conversation=await fresh(chat), content="go")
    await chat_replies().wait_idle()
    assert (await Message.objects.aget(role="assistant")).status == Message.Status.COMPLETE


@pytest.mark.parametrize("pressed_on", ["here", "elsewhere"])
async def test_a_stop_whose_cancel_a_channel_layer_send_swallows_still_stops_the_reply(
    layer: str, pressed_on: str, fake_engine: FakeEngine, chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.11's asyncio.wait_for, which redis-py sends every command through, returns its result and
    drops a cancel that lands as the send completes. CI saw it: a reply ran to its end after Stop."""
    slow(fake_engine)
    running = ChatReplies()
    presser = running if pressed_on == "here" else chat_replies()
    send, in_send, swallowed = events.broadcast, asyncio.Event(), []

    async def swallowing_send(conversation_id: int, *sent: dict[str, Any]) -> None:
        in_send.set()
        try:
            await asyncio.sleep(2.0)  # the Stop lands in here, however slow the machine
        except asyncio.CancelledError:
            swallowed.append(conversation_id)
        await send(conversation_id, *sent)

    await running.send(conversation=chat, content="go")
    await until(lambda: Message.objects.filter(role="assistant", content__contains="word").aexists())
    monkeypatch.setattr(events, "broadcast", swallowing_send)
    in_send.clear()
    await in_send.wait()
    await presser.stop(chat.pk)
    await asyncio.wait_for(running.wait_idle(), 20)
    assert swallowed == [chat.pk]
    reply = await Message.objects.aget(role="assistant")
    assert reply.status == Message.Status.STOPPED and reply.finish_reason == "abort"
    assert reply.content.count("word") < 100 and fake_engine.aborted


async def test_a_page_load_elsewhere_sees_the_live_reply_streaming(
    layer: str, fake_engine: FakeEngine, chat: Conversation
) -> None:
    slow(fake_engine)
    running = ChatReplies()
    await running.send(conversation=chat, content="go")
    await until(lambda: Message.objects.filter(role="assistant", content__contains="word").aexists())
    shown = await sync_to_async(selectors.conversation_messages)(conversation=await fresh(chat))
    assert shown[-1].status == Message.Status.STREAMING  # not "interrupted": another replica runs it
    # A socket on this replica gets the reply so far (as last saved) and the running state.
    user = await User.objects.aget(username="alice")
    ws = await open_socket(user, chat.pk)
    assert (await ws.connect())[0]
    first = await ws.receive_json_from()
    assert first["type"] == "upsert" and "word" in first["html"]
    assert await ws.receive_json_from() == {"type": "state", "running": True}
    await running.stop(chat.pk)
    await running.wait_idle()
    await receive_until(ws, lambda e: e == {"type": "state", "running": False})
    await ws.disconnect()


async def test_a_dead_replicas_reply_reads_interrupted_and_the_chat_is_usable(
    layer: str, fake_engine: FakeEngine, chat: Conversation
) -> None:
    # What a replica killed mid-reply leaves: its reply streaming, its lease lapsing.
    await sync_to_async(services.user_message_create)(conversation=chat, content="hi")
    orphan = await sync_to_async(services.assistant_message_create)(conversation=chat, model="m")
    orphan.content = "Half a rep"
    await sync_to_async(services.assistant_message_save)(message=orphan)
    lapsed = timezone.now() - dt.timedelta(seconds=1)
    await Conversation.objects.filter(pk=chat.pk).aupdate(reply_lease_until=timezone.now() + dt.timedelta(60))
    assert (await sync_to_async(selectors.conversation_messages)(conversation=await fresh(chat)))[
        -1
    ].status == Message.Status.STREAMING
    with pytest.raises(Conflict):
        await chat_replies().send(conversation=await fresh(chat), content="not yet")
    await Conversation.objects.filter(pk=chat.pk).aupdate(reply_lease_until=lapsed)
    shown = await sync_to_async(selectors.conversation_messages)(conversation=await fresh(chat))
    assert shown[-1].status == Message.Status.STOPPED and shown[-1].content == "Half a rep"
    await chat_replies().send(conversation=await fresh(chat), content="again")
    await chat_replies().wait_idle()
    await orphan.arefresh_from_db()
    assert orphan.status == Message.Status.STOPPED and orphan.finish_reason == "interrupted"


async def test_the_running_replica_renews_its_lease(
    layer: str, fake_engine: FakeEngine, chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow(fake_engine)
    monkeypatch.setattr(leases, "RENEW_S", 0.05)
    monkeypatch.setattr(leases, "LEASE_S", 0.5)
    running = chat_replies()
    await running.send(conversation=chat, content="go")
    await asyncio.sleep(1.0)  # twice the lease: only renewals keep it
    assert leases.reply_is_live(await fresh(chat))
    await running.stop(chat.pk)
    await running.wait_idle()
    assert (await fresh(chat)).reply_lease_until is None
