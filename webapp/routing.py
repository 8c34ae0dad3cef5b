"""WebSocket routes of every app, behind the origin and auth checks in webapp/asgi.py."""

from typing import Any

from webapp.chat.routing import websocket_urlpatterns as chat_routes
from webapp.core.routing import websocket_urlpatterns as core_routes

websocket_urlpatterns: list[Any] = [*core_routes, *chat_routes]
