from django.urls import path

from webapp.chat.consumers import ChatConsumer
from webapp.core.origins import SameOriginValidator

# The Origin check is repeated here (asgi.py also wraps the router) so this route is safe on its own.
websocket_urlpatterns = [
    path("ws/chat/<int:conversation_id>/", SameOriginValidator(ChatConsumer.as_asgi())),
]
