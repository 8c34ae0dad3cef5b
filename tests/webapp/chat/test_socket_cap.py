"""A user may hold at most MOONCAKE_CHAT_MAX_SOCKETS_PER_USER chat sockets; closing one frees a place."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from tests.webapp.chat.wsutil import open_socket
from webapp.chat.models import Conversation
from webapp.chat.sockets import CLOSE_TOO_MANY_SOCKETS, OpenSockets
from webapp.serving.runtime import Runtime

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def make_user(name: str) -> tuple[User, Conversation]:
    user = User.objects.create_user(name, password="pw-123456789")
    return user, Conversation.objects.create(user=user, title="t")


async def test_sockets_over_the_cap_are_refused_and_places_come_back(settings: Any, runtime: Runtime) -> None:
    settings.MOONCAKE_CHAT_MAX_SOCKETS_PER_USER = 2
    alice, chat = await make_user("alice")
    bob, bobs_chat = await make_user("bob")
    first, second = await open_socket(alice, chat.pk), await open_socket(alice, chat.pk)
    assert (await first.connect())[0] and (await second.connect())[0]
    third = await open_socket(alice, chat.pk)
    assert await third.connect() == (False, CLOSE_TOO_MANY_SOCKETS)
    other = await open_socket(bob, bobs_chat.pk)
    assert (await other.connect())[0]  # the cap is per user
    await first.disconnect()
    again = await open_socket(alice, chat.pk)
    assert (await again.connect())[0]
    for ws in (second, other, again):
        await ws.disconnect()
    assert runtime.service(OpenSockets).count(alice.pk) == 0


async def test_a_refused_chat_id_frees_its_place(settings: Any, runtime: Runtime) -> None:
    settings.MOONCAKE_CHAT_MAX_SOCKETS_PER_USER = 1
    alice, chat = await make_user("alice")
    for _ in range(3):  # someone else's (or a missing) chat: closed, and the place is given back
        ws = await open_socket(alice, chat.pk + 1000)
        assert not (await ws.connect())[0]
    ws = await open_socket(alice, chat.pk)
    assert (await ws.connect())[0]
    await ws.disconnect()
