"""However a chat socket ends, its place in the user's socket count comes back and its group is left: a
flood (closed with a code Daphne accepts), a consumer that fails, a consumer Daphne cancels."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.live_server import LiveDaphne
from tests.webapp.chat.wsutil import login_session
from webapp.chat import consumers, events, guard
from webapp.chat.models import Conversation
from webapp.chat.routing import websocket_urlpatterns
from webapp.chat.sockets import OpenSockets
from webapp.serving.runtime import Runtime

pytestmark = pytest.mark.django_db(transaction=True)


def server_may_send(code: int) -> bool:
    """The close codes a server may send (RFC 6455 7.4), as Daphne's library (autobahn) enforces them."""
    return code == 1000 or 3000 <= code <= 4999


def like_daphne(app: Any) -> Any:
    """`app` behind a send that refuses what Daphne's WebSocket library refuses: the consumer sees the
    ValueError it would see under Daphne (the socket then ends with 1011)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        async def checked(message: dict[str, Any]) -> None:
            code = message.get("code", 1000)
            if message["type"] == "websocket.close" and not server_may_send(code):
                raise ValueError(f"invalid close code {code} (must be 1000 or from [3000, 4999])")
            await send(message)

        await app(scope, receive, checked)

    return wrapped


async def daphne_socket(user: User, chat: Conversation) -> Any:
    ws = WebsocketCommunicator(
        like_daphne(URLRouter(websocket_urlpatterns)),
        f"/ws/chat/{chat.pk}/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )
    ws.scope["user"] = user
    ws.scope["session"] = await sync_to_async(login_session)(user)
    ok, _ = await ws.connect()
    assert ok
    assert await ws.receive_json_from() == {"type": "state", "running": False}
    return ws


def in_group(chat: Conversation) -> int:
    layer: Any = get_channel_layer()
    return len(layer.groups.get(events.group_name(chat.pk), {}))


async def flood(ws: Any) -> dict[str, Any]:
    """Frames as fast as they go until the server closes: what it closed with."""
    for _ in range(3 * (guard.FRAME_BURST + guard.FLOOD_CLOSE_AFTER)):
        await ws.send_to(text_data="{}")
    while True:
        message: dict[str, Any] = await ws.receive_output(timeout=5)
        if message["type"] == "websocket.close":
            return message


@pytest.mark.database
async def test_floods_close_with_a_code_daphne_accepts_and_give_the_place_back(
    settings: Any, monkeypatch: pytest.MonkeyPatch, runtime: Runtime, alice: User, chat: Conversation
) -> None:
    settings.MOONCAKE_CHAT_MAX_SOCKETS_PER_USER = 2
    monkeypatch.setattr(guard, "FRAME_REFILL_PER_S", 0.0)
    sockets = runtime.service(OpenSockets)
    for _ in range(3):  # more floods than places: each gives its place back
        ws = await daphne_socket(alice, chat)
        closed = await flood(ws)
        assert closed == {"type": "websocket.close", "code": guard.CLOSE_POLICY_VIOLATION}
        assert server_may_send(closed["code"])
        await ws.disconnect()  # the client's answer to the close, as Daphne delivers it
        await ws.wait(timeout=5)
        assert sockets.count(alice.pk) == 0 and in_group(chat) == 0
    ws = await daphne_socket(alice, chat)
    await ws.disconnect()


@pytest.mark.database
async def test_a_failing_consumer_gives_its_place_back(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime, alice: User, chat: Conversation
) -> None:
    def broken(text_data: str | None, bytes_data: bytes | None) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(consumers, "decode_frame", broken)
    ws = await daphne_socket(alice, chat)
    assert runtime.service(OpenSockets).count(alice.pk) == 1 and in_group(chat) == 1
    await ws.send_to(text_data="{}")
    with pytest.raises(RuntimeError, match="a bug"):
        await ws.receive_output(timeout=5)  # the consumer ended with its exception (Daphne: 1011)
    assert runtime.service(OpenSockets).count(alice.pk) == 0 and in_group(chat) == 0


@pytest.mark.database
async def test_a_cancelled_consumer_gives_its_place_back(
    runtime: Runtime, alice: User, chat: Conversation
) -> None:
    # Daphne cancels an application that outlives its socket by application_close_timeout, and every
    # application when it stops.
    ws = await daphne_socket(alice, chat)
    ws.future.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ws.future
    assert runtime.service(OpenSockets).count(alice.pk) == 0 and in_group(chat) == 0


# ---- through real Daphne: its WebSocket library is the one that refused 1008 ---------------------------


@pytest.mark.slow
async def test_floods_over_daphne_close_cleanly_and_never_use_up_the_places(
    daphne_server: LiveDaphne,
) -> None:
    name = "flooder"
    await asyncio.to_thread(daphne_server.create_user, name, "flood-password-1")
    chat = int(
        await asyncio.to_thread(
            daphne_server.shell,
            "from django.contrib.auth.models import User\n"
            "from webapp.chat.services import conversation_create\n"
            f"print(conversation_create(user=User.objects.get(username={name!r})).pk)\n",
        )
    )
    cookie = f"sessionid={await asyncio.to_thread(daphne_server.login_session, name)}"
    url = f"{daphne_server.ws_url}/ws/chat/{chat}/"

    async def open_socket() -> ClientConnection:
        return await connect(url, origin=daphne_server.url, additional_headers={"Cookie": cookie})  # type: ignore[arg-type]

    places = 32  # settings.MOONCAKE_CHAT_MAX_SOCKETS_PER_USER's default, which the server runs with
    for _ in range(places + 1):
        ws = await open_socket()
        with pytest.raises(ConnectionClosed) as closed:
            for _ in range(3 * (guard.FRAME_BURST + guard.FLOOD_CLOSE_AFTER)):
                await ws.send("{}")
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == guard.CLOSE_POLICY_VIOLATION  # not 1011: the consumer did not crash
    ws = await open_socket()  # every flood gave its place back
    assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "state"
    await ws.close()
