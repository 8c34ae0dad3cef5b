"""Helpers to drive the chat socket with WebsocketCommunicator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from webapp.chat.routing import websocket_urlpatterns


async def open_socket(user: Any, conversation_id: int, *, origin: bytes = b"http://testserver") -> Any:
    """A connected communicator (scope user set directly, as AuthMiddlewareStack would)."""
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/chat/{conversation_id}/", headers=[(b"origin", origin)]
    )
    communicator.scope["user"] = user
    return communicator


async def connected(user: Any, conversation_id: int) -> Any:
    """An open socket on the chat that has said its opening state (no reply running)."""
    communicator = await open_socket(user, conversation_id)
    ok, _ = await communicator.connect()
    assert ok
    assert await communicator.receive_json_from() == {"type": "state", "running": False}
    return communicator


async def receive_until(
    communicator: Any, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0
) -> list[dict[str, Any]]:
    """Events up to and including the first one matching predicate."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            event = await communicator.receive_json_from(timeout=timeout)
            seen.append(event)
            if predicate(event):
                return seen


def is_idle(event: dict[str, Any]) -> bool:
    return event == {"type": "state", "running": False}
