from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from webapp.chat.consumers import ChatConsumer

# The Origin check is repeated here (asgi.py also wraps the router) so this route is safe on its own.
websocket_urlpatterns = [
    path("ws/chat/<int:conversation_id>/", AllowedHostsOriginValidator(ChatConsumer.as_asgi())),
]
