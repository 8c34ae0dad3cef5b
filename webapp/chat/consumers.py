"""The chat socket: watches one conversation's group and forwards the user's actions to the service.

However the socket ends (the client closes, the server closes it, the consumer fails, or Daphne cancels
it), its place in the user's socket count is given back and its group left: __call__ ends in `_leave`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.chat import events, guard, selectors
from webapp.chat.errors import notice_for
from webapp.chat.generation import chat_replies
from webapp.chat.guard import CLOSE_POLICY_VIOLATION, FrameError, FrameLimiter, UserCheck, decode_frame
from webapp.chat.model_loading import load_waits
from webapp.chat.models import Conversation
from webapp.chat.sockets import CLOSE_TOO_MANY_SOCKETS, OpenSockets
from webapp.core.errors import InvalidRequest, MooncakeError, NotFound
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
# Actions that write a reply with the chat's model (Continue keeps its reply's model: admission loads it).
WAITS_FOR_MODEL = frozenset({"send", "edit", "regenerate"})
CLOSE_NOT_FOUND = 4404


class ChatConsumer(AsyncJsonWebsocketConsumer):
    conversation: Conversation
    group: str = ""
    user_check: UserCheck | None = None
    closed: bool = False
    socket_owner: int | None = None  # the user whose socket count this socket holds
    watcher: asyncio.Task[None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limiter = FrameLimiter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._leave()

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        sockets = get_runtime().service(OpenSockets)
        if not sockets.claim(user.pk):
            await self.close(code=CLOSE_TOO_MANY_SOCKETS)
            return
        self.socket_owner = user.pk
        conversation_id = int(self.scope["url_route"]["kwargs"]["conversation_id"])
        conversation = await Conversation.objects.filter(pk=conversation_id, user=user).afirst()
        if conversation is None:  # Someone else's chat looks exactly like a missing one.
            self._release_socket()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.conversation = conversation
        self.user_check = UserCheck.of(user, self.scope.get("session"))
        self.group = events.group_name(conversation_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.watcher = asyncio.create_task(self._watch_login())
        # A tab that (re)opens mid-reply gets the reply so far, then follows the group: from memory when the
        # reply runs in this process, else as another replica last saved it.
        reply = chat_replies().running(conversation_id)
        if reply is not None:
            await self.send_json(reply.upsert())
            await self.send_json(events.state(running=True))
            return
        elsewhere = await database_sync_to_async(selectors.streaming_reply)(conversation=conversation)
        if elsewhere is not None:
            shown = await database_sync_to_async(selectors.with_branch)(elsewhere)
            await self.send_json(await database_sync_to_async(events.upsert)(shown))
        await self.send_json(events.state(running=elsewhere is not None))

    async def disconnect(self, code: int) -> None:
        # Leaving never stops a reply: generation belongs to the service, not to the socket.
        await self._leave()

    async def _leave(self) -> None:
        """Give back the socket's place and leave the group; idempotent, as every ending calls it."""
        self._release_socket()
        if self.watcher is not None and self.watcher is not asyncio.current_task():
            self.watcher.cancel()
        self.watcher = None
        group, self.group = self.group, ""
        if group:
            with contextlib.suppress(Exception):  # a layer that is down must not keep the place taken
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        # The rate limit comes first and costs no database work, so a flood cannot load the database.
        if self.closed:
            return
        if not self.limiter.admit():
            if self.limiter.flooding:
                await self._close(CLOSE_POLICY_VIOLATION)
            else:
                await self.send_json(events.error("too_fast", "Too many messages at once; slow down."))
            return
        try:
            content = decode_frame(text_data, bytes_data)
        except FrameError as exc:
            await self.send_json(events.error("invalid", exc.message))
            return
        if not await self._user_still_valid():
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            await self.send_json(events.error("invalid", "Expected a JSON object."))
            return
        try:
            await self._dispatch(content)
        except MooncakeError as exc:
            notice = notice_for(exc, model=self.conversation.model)
            await self.send_json(events.error(notice.code, notice.message))
        except Exception:  # Keep the socket open; the user can retry.
            logger.exception("Chat action failed")
            await self.send_json(events.error("server_error", "Something went wrong. Try again."))

    async def _dispatch(self, content: dict[str, Any]) -> None:
        # Settings may have changed in another tab since connect; the chat may even be gone.
        try:
            await database_sync_to_async(self.conversation.refresh_from_db)()
        except Conversation.DoesNotExist as exc:
            raise NotFound("This chat was deleted.", code="not_found") from exc
        action = content.get("type")
        if action in WAITS_FOR_MODEL:
            # A model that is not loaded loads first, and the action runs once it is ready (off this socket).
            act = lambda: self._act(action, content)  # noqa: E731
            if await load_waits().defer(
                conversation=self.conversation, model=self.conversation.model, act=act
            ):
                return
        await self._act(action, content)

    async def _act(self, action: Any, content: dict[str, Any]) -> None:
        service = chat_replies()
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
            raw = content.get("message_id")
            await service.regenerate(
                conversation=self.conversation, message_id=None if raw is None else _int(raw)
            )
        elif action == "continue":
            await service.continue_reply(
                conversation=self.conversation, message_id=_int(content.get("message_id"))
            )
        elif action == "switch":
            await service.switch(conversation=self.conversation, message_id=_int(content.get("message_id")))
        elif action == "stop":
            await service.stop(self.conversation.pk)
        else:
            raise InvalidRequest("Unknown action.", code="invalid")

    async def chat_event(self, event: dict[str, Any]) -> None:
        # A socket that only watches is re-checked too, as the events reach it (throttled).
        if self.closed or not await self._user_still_valid():
            return
        await self.send_json(event["payload"])

    def _release_socket(self) -> None:
        if self.socket_owner is not None:
            get_runtime().service(OpenSockets).release(self.socket_owner)
            self.socket_owner = None

    async def _watch_login(self) -> None:
        """Re-check the login once each period, so a socket that only listens (no frames, no events)
        closes within REVALIDATE_INTERVAL_S of a logout too."""
        while not self.closed:
            # Until the check falls due (a frame may have made one since); the interval is read each time
            # (tests shorten it), and a floor keeps a zero setting from spinning on the database.
            since = time.monotonic() - self.user_check.checked if self.user_check else 0.0
            await asyncio.sleep(max(guard.REVALIDATE_INTERVAL_S - since, 0.05))
            try:
                if not await self._user_still_valid():
                    return
            except Exception:  # the database is away: keep the socket, try again next period
                logger.warning("Re-checking a chat socket's login failed", exc_info=True)

    async def _user_still_valid(self) -> bool:
        """Re-read the user at most every REVALIDATE_INTERVAL_S; close the socket once the login is void."""
        check = self.user_check
        if check is None or not check.due() or await check.still_valid():
            return True
        await self._close(CLOSE_UNAUTHENTICATED)
        return False

    async def _close(self, code: int) -> None:
        self.closed = True
        await self.close(code=code)


def _int(value: Any) -> int:
    # bool is an int to Python, and a float would be truncated: only whole numbers (or digit strings) pass.
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidRequest("Bad message id.", code="invalid")
    try:
        number = int(value)
    except ValueError as exc:
        raise InvalidRequest("Bad message id.", code="invalid") from exc
    if not 0 < number < 2**63:
        raise InvalidRequest("Bad message id.", code="invalid")
    return number
