"""WebSockets pass SameOriginValidator and AuthMiddlewareStack: foreign origins (another host, port or
scheme) and anonymous users are refused before the handshake completes; a logged-in user on our origin gets
through."""

from __future__ import annotations

from typing import Any

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


# ---- the Origin must be the server's own, scheme and port included (webapp.core.origins) ----------------


async def _handshake(cookie: bytes, origin: bytes, host: bytes, scheme: str = "ws") -> bool:
    communicator = WebsocketCommunicator(
        application, "/ws/ping/", headers=[(b"origin", origin), (b"host", host), (b"cookie", cookie)]
    )
    communicator.scope["scheme"] = scheme
    connected, _ = await communicator.connect()
    await communicator.disconnect()
    return bool(connected)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (b"http://127.0.0.1:8090", True),
        (b"http://127.0.0.1:9999", False),  # another port of the same host: another site
        (b"http://localhost:8090", False),  # an allowed host, but not this request's
        (b"https://127.0.0.1:8090", False),  # another scheme
        (b"http://127.0.0.1", False),
        (b"null", False),
    ],
)
async def test_origin_must_match_scheme_host_and_port(origin: bytes, allowed: bool) -> None:
    cookie = await sync_to_async(_session_cookie)()
    assert await _handshake(cookie, origin, b"127.0.0.1:8090") is allowed


@pytest.mark.django_db(transaction=True)
async def test_origin_of_a_host_django_refuses_is_refused() -> None:
    cookie = await sync_to_async(_session_cookie)()
    assert not await _handshake(cookie, b"http://evil.example:8090", b"evil.example:8090")


@pytest.mark.django_db(transaction=True)
async def test_secure_sockets_want_an_https_origin(settings: Any) -> None:
    cookie = await sync_to_async(_session_cookie)()
    assert await _handshake(cookie, b"https://testserver", b"testserver", scheme="wss")
    assert not await _handshake(cookie, b"http://testserver", b"testserver", scheme="wss")
    # Behind a TLS proxy (production's SECURE_PROXY_SSL_HEADER), as Django decides for the site's POSTs.
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    communicator = WebsocketCommunicator(
        application,
        "/ws/ping/",
        headers=[(b"origin", b"https://testserver"), (b"host", b"testserver"), (b"cookie", cookie),
                 (b"x-forwarded-proto", b"https")],
    )  # fmt: skip
    assert (await communicator.connect())[0] is True
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_csrf_trusted_origins_are_trusted_here_too(settings: Any) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["http://localhost:8090", "https://*.example.com"]
    cookie = await sync_to_async(_session_cookie)()
    assert await _handshake(cookie, b"http://localhost:8090", b"127.0.0.1:8090")
    assert await _handshake(cookie, b"https://chat.example.com", b"127.0.0.1:8090")
    assert not await _handshake(cookie, b"http://chat.example.com", b"127.0.0.1:8090")
    assert not await _handshake(cookie, b"https://chat.example.com:444", b"127.0.0.1:8090")
    assert not await _handshake(cookie, b"http://localhost:8091", b"127.0.0.1:8090")
