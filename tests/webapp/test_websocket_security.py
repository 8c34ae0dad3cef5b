"""WebSockets pass AllowedHostsOriginValidator and AuthMiddlewareStack: foreign origins and anonymous users
are refused before the handshake completes; a logged-in user on our origin gets through."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from webapp.asgi import application
from webapp.core.consumers import CLOSE_UNAUTHENTICATED

OUR_ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")


def _session_cookie() -> bytes:
    user = User.objects.create_user("wsuser", password="sockets-42")
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.mark.django_db(transaction=True)
async def test_foreign_origin_is_rejected_even_when_logged_in() -> None:
    cookie = await sync_to_async(_session_cookie)()
    communicator = WebsocketCommunicator(
        application, "/ws/ping/", headers=[(b"origin", b"http://evil.example.com"), HOST, (b"cookie", cookie)]
    )
    connected, _ = await communicator.connect()
    assert connected is False
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_missing_origin_is_rejected() -> None:
    communicator = WebsocketCommunicator(application, "/ws/ping/", headers=[HOST])
    connected, _ = await communicator.connect()
    assert connected is False
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_anonymous_socket_is_rejected() -> None:
    communicator = WebsocketCommunicator(application, "/ws/ping/", headers=[OUR_ORIGIN, HOST])
    connected, code = await communicator.connect()
    assert connected is False
    assert code == CLOSE_UNAUTHENTICATED
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_logged_in_user_on_our_origin_is_accepted() -> None:
    cookie = await sync_to_async(_session_cookie)()
    communicator = WebsocketCommunicator(
        application, "/ws/ping/", headers=[OUR_ORIGIN, HOST, (b"cookie", cookie)]
    )
    connected, _ = await communicator.connect()
    assert connected is True
    await communicator.send_json_to({"type": "ping"})
    assert await communicator.receive_json_from() == {"type": "pong", "user": "wsuser"}
    await communicator.send_json_to({"type": "nonsense"})
    assert (await communicator.receive_json_from())["type"] == "error"
    await communicator.disconnect()
