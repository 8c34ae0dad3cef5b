"""WebSocket routes of every app, behind the origin and auth checks in webapp/asgi.py."""

from typing import Any

from webapp.appurls import websocket_patterns

websocket_urlpatterns: list[Any] = [
    *websocket_patterns("webapp.core.routing"),
    *websocket_patterns("webapp.chat.routing"),
]
