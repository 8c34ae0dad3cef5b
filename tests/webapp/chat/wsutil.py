"""Helpers to drive the chat socket with WebsocketCommunicator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.base import SessionBase

from webapp.chat.routing import websocket_urlpatterns


async def open_socket(user: Any, conversation_id: int, *, origin: bytes = b"http://testserver") -> Any:
    """A communicator for the chat socket, its scope's user and session set directly as AuthMiddlewareStack
    would set them: a logged-in session in the database, as a browser's cookie names one."""
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns),
        f"/ws/chat/{conversation_id}/",
        headers=[(b"origin", origin), (b"host", b"testserver")],
    )
    communicator.scope["user"] = user
    if getattr(user, "is_authenticated", False):
        communicator.scope["session"] = await sync_to_async(login_session)(user)
    return communicator


def login_session(user: Any) -> SessionBase:
    """A saved session logged in as `user` (what django.contrib.auth.login leaves behind)."""
    session = import_module(settings.SESSION_ENGINE).SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session  # type: ignore[no-any-return]


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
