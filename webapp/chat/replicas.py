"""What makes a chat reply the conversation's rather than one process's, across replicas.

- The reply lease (webapp.chat.leases) says whether a reply is running, wherever it runs; this renews the
  leases of the replies this process runs.
- Stop pressed on another replica reaches the one running the reply through the channel layer: while it
  runs replies, this process listens on a channel of its own, added to each running chat's control group.
  The channel layer delivers at most once (channels_redis drops a message to a process whose backlog is
  at capacity), so the stop is also written on the chat's row, which the running replica reads as it
  saves the reply and renews its lease.
- The live tokens already travel through the channel layer (webapp.chat.events), so any replica's sockets
  follow a reply wherever it runs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from webapp.chat import leases
from webapp.serving.cancellation import raise_if_cancel_was_swallowed

logger = logging.getLogger(__name__)

STOP = "chat.stop"


def control_group(conversation_id: int) -> str:
    return f"chat_control_{conversation_id}"


class ReplyCoordinator:
    """This process's side of the replies it runs: their leases and the stops sent from elsewhere."""

    def __init__(self, stop_local: Callable[[int], Coroutine[Any, Any, bool]]) -> None:
        self._stop_local = stop_local
        self._held: set[int] = set()
        self._channel: str | None = None
        self._listener: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[bool]] = set()

    async def take(self, conversation_id: int) -> dt.datetime | None:
        """Take the chat's lease: its end, or None when a reply runs for it on any replica."""
        return await database_sync_to_async(leases.reply_lease_take)(conversation_id=conversation_id)

    async def give_back(self, conversation_id: int) -> None:
        await database_sync_to_async(leases.reply_lease_release)(conversation_id=conversation_id)

    async def started(self, conversation_id: int) -> None:
        """A reply runs here now: keep its lease alive and listen for stops sent to it."""
        self._held.add(conversation_id)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew())
        layer = get_channel_layer()
        if layer is None:
            return
        if self._channel is None:
            # The default prefix: channels_redis reads every process-local channel through one shared
            # Redis list per prefix, and a second prefix's reader would starve the sockets' reads.
            self._channel = await layer.new_channel()
            self._listener = asyncio.create_task(self._listen(layer, self._channel))
        await layer.group_add(control_group(conversation_id), self._channel)

    async def finished(self, conversation_id: int) -> None:
        """The reply ended (saved): give the lease back and stop listening for it."""
        self._held.discard(conversation_id)
        try:
            await self.give_back(conversation_id)
        finally:
            layer = get_channel_layer()
            if layer is not None and self._channel is not None:
                await layer.group_discard(control_group(conversation_id), self._channel)
            if not self._held:
                self._quiet()

    async def request_stop(self, conversation_id: int) -> None:
        """Ask whichever replica runs the chat's reply to stop it: on the row, then through the layer."""
        if not await database_sync_to_async(leases.reply_stop_request)(conversation_id=conversation_id):
            return  # no reply is running anywhere
        layer = get_channel_layer()
        if layer is not None:
            await layer.group_send(control_group(conversation_id), {"type": STOP, "id": conversation_id})

    async def _renew(self) -> None:
        while self._held:
            await asyncio.sleep(leases.RENEW_S)
            try:
                stop = await database_sync_to_async(leases.reply_leases_renew)(
                    conversation_ids=sorted(self._held)
                )
            except Exception:  # the next renewal tries again; the lease outlives a few misses
                logger.exception("Renewing reply leases failed")
                continue
            for conversation_id in stop:  # a reply that has not saved since (queued, say)
                self._stop_soon(conversation_id)

    async def _listen(self, layer: Any, channel: str) -> None:
        while True:
            raise_if_cancel_was_swallowed()  # _quiet()'s cancel can land on the receive's Redis call
            message = await layer.receive(channel)
            if message.get("type") == STOP:
                self._stop_soon(int(message["id"]))

    def _stop_soon(self, conversation_id: int) -> None:
        # Not awaited: a stop waits for its reply's final save, and others may follow.
        task = asyncio.create_task(self._stop_local(conversation_id))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _quiet(self) -> None:
        """No reply runs here: no renewals, no listening (nothing outlives the replies). No await in
        here, so a reply starting meanwhile cannot find half-stopped tasks."""
        for task in (self._renewer, self._listener):
            if task is not None:
                task.cancel()
        self._renewer = self._listener = None
        self._channel = None
