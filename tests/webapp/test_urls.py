"""Every app is mounted by a plain include: a missing or misspelled app fails at import, never silently."""

from __future__ import annotations

from django.urls import reverse

from webapp.routing import websocket_urlpatterns


def test_every_app_has_its_routes() -> None:
    assert reverse("chat:index") == "/chat/"
    assert reverse("api:list_models") == "/v1/models"
    assert reverse("api:openapi-json") == "/v1/openapi.json"
    assert reverse("console:models").startswith("/console/")
    assert reverse("core:login") == "/login/"
    assert {str(p.pattern) for p in websocket_urlpatterns} == {"ws/ping/", "ws/chat/<int:conversation_id>/"}
