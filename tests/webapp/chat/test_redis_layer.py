"""The chat socket on channels_redis: what several replicas sharing one Redis channel layer rely on."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.chat.wsutil import connected, is_idle, receive_until
from webapp.chat import events, services
from webapp.chat.generation import chat_replies
from webapp.chat.models import Message

# Generous: a loaded 2-core CI machine must not turn a slow hop through Redis into a failure.
TIMEOUT = 15.0

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


async def test_groups_reach_across_layer_instances(redis_channel_layer: Any, redis_url: str) -> None:
    """Two layer instances stand in for two replicas: a broadcast from one reaches a socket on the other."""
    from channels_redis.core import RedisChannelLayer

    other_replica = RedisChannelLayer(hosts=[redis_url])
    channel = await other_replica.new_channel()
    await other_replica.group_add(events.group_name(7), channel)
    await events.broadcast(7, events.state(running=True), events.title("T"))
    first, second = await other_replica.receive(channel), await other_replica.receive(channel)
    assert [first["payload"], second["payload"]] == [events.state(running=True), events.title("T")]
    await other_replica.flush()


@pytest.mark.database
async def test_two_sockets_share_the_stream_and_stop(
    redis_channel_layer: Any, fake_engine: FakeEngine
) -> None:
    from channels_redis.core import RedisChannelLayer

    assert isinstance(redis_channel_layer, RedisChannelLayer)
    alice = await sync_to_async(User.objects.create_user)("alice", password="pw")
    chat = await sync_to_async(services.conversation_create)(user=alice)
    fake_engine.delay = 0.03
    fake_engine.reply = " ".join(["word"] * 200)
    tab1, tab2 = await connected(alice, chat.pk), await connected(alice, chat.pk)
    await tab1.send_json_to({"type": "send", "content": "Both", "nonce": "mine"})
    # Both sockets get the user's message and the reply's first words through Redis.
    for tab in (tab1, tab2):
        seen = await receive_until(tab, lambda e: e["type"] == "upsert" and "word" in e["html"], TIMEOUT)
        assert seen[0]["type"] == "upsert" and seen[0]["nonce"] == "mine"
    await tab2.send_json_to({"type": "stop"})  # the tab that did not send stops the reply
    for tab in (tab1, tab2):
        final = [e for e in await receive_until(tab, is_idle, TIMEOUT) if e["type"] == "upsert"][-1]
        assert "stopped" in final["html"]
    await chat_replies().wait_idle()
    reply = await Message.objects.filter(conversation=chat, role="assistant").afirst()
    assert reply is not None and reply.status == "stopped" and fake_engine.aborted
    await tab1.disconnect()
    await tab2.disconnect()
