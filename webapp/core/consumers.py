"""WebSocket consumers: a base that refuses anonymous sockets, and a ping consumer that proves the stack."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

# Sent as the close code when a socket is refused before the handshake completes (Daphne answers 403).
CLOSE_UNAUTHENTICATED = 4401


class AuthenticatedJsonWebsocketConsumer(AsyncJsonWebsocketConsumer):
    """Accepts only logged-in users; subclasses override `on_connect` instead of `connect`.

    Needs AuthMiddlewareStack in front (webapp/asgi.py puts it there) so `scope["user"]` exists.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.accept()
        await self.on_connect()

    async def on_connect(self) -> None:
        """Runs after the socket is accepted for an authenticated user."""


class PingConsumer(AuthenticatedJsonWebsocketConsumer):
    """Answers {"type": "ping"} with {"type": "pong", "user": username}."""

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong", "user": self.scope["user"].get_username()})
        else:
            await self.send_json({"type": "error", "message": 'expected {"type": "ping"}'})
