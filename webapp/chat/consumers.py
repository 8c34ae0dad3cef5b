"""The chat socket: watches one conversation's group and forwards the user's actions to the service."""

from __future__ import annotations

import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.chat import events
from webapp.chat.errors import ChatError
from webapp.chat.generation import get_generation_service
from webapp.chat.models import Conversation

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class ChatConsumer(AsyncJsonWebsocketConsumer):
    conversation: Conversation
    group: str = ""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        conversation_id = int(self.scope["url_route"]["kwargs"]["conversation_id"])
        conversation = await Conversation.objects.filter(pk=conversation_id, user=user).afirst()
        if conversation is None:  # Someone else's chat looks exactly like a missing one.
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.conversation = conversation
        self.group = events.group_name(conversation_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # A tab that (re)opens mid-reply gets the reply so far from memory, then follows the group.
        reply = get_generation_service().running(conversation_id)
        if reply is not None:
            await self.send_json(events.upsert(reply.message))
        await self.send_json(events.state(running=reply is not None))

    async def disconnect(self, code: int) -> None:
        # Leaving never stops a reply: generation belongs to the service, not to the socket.
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            await self.send_json(events.error("invalid", "Expected a JSON object."))
            return
        try:
            await self._dispatch(content)
        except ChatError as exc:
            await self.send_json(events.error(exc.code, exc.message))
        except Exception:  # Keep the socket open; the user can retry.
            logger.exception("Chat action failed")
            await self.send_json(events.error("server_error", "Something went wrong. Try again."))

    async def _dispatch(self, content: dict[str, Any]) -> None:
        service = get_generation_service()
        # Settings may have changed in another tab since connect; the chat may even be gone.
        try:
            await database_sync_to_async(self.conversation.refresh_from_db)()
        except Conversation.DoesNotExist as exc:
            raise ChatError("not_found", "This chat was deleted.") from exc
        action = content.get("type")
        nonce = str(content.get("nonce") or "")[:64] or None
        if action == "send":
            await service.send(
                conversation=self.conversation, content=str(content.get("content", "")), nonce=nonce
            )
        elif action == "edit":
            message_id = _int(content.get("message_id"))
            await service.edit(
                conversation=self.conversation,
                message_id=message_id,
                content=str(content.get("content", "")),
                nonce=nonce,
            )
        elif action == "regenerate":
            await service.regenerate(conversation=self.conversation)
        elif action == "stop":
            await service.stop(self.conversation.pk)
        else:
            raise ChatError("invalid", "Unknown action.")

    async def chat_event(self, event: dict[str, Any]) -> None:
        await self.send_json(event["payload"])


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ChatError("invalid", "Bad message id.") from exc
