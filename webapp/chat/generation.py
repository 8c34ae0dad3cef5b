"""Running chat replies: one asyncio task per reply, independent of any socket.

A reply keeps going (and is saved at least every SAVE_INTERVAL_S) when its tab closes; sockets only watch
it through the chat's Channels group. Only stop() (or deleting the chat) aborts it.

Every reply goes through the runtime's generation service, as an API request does (webapp.chat.admission),
and is admitted before the user's message is saved, so a refused send leaves the history as it was. Its
request-log row (source "chat") is written when the run closes, with the outcome _run gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from inference.api import EngineClient
from webapp.chat import errors, events, selectors, services
from webapp.chat.admission import ChatJob, admit_send, check_length, record_failure
from webapp.chat.markdown_stream import IncrementalMarkdown
from webapp.chat.models import Conversation, Message
from webapp.chat.replicas import ReplyCoordinator
from webapp.chat.titles import TitleWriter
from webapp.core.errors import Conflict, InvalidRequest
from webapp.core.generation import GenerationRun
from webapp.core.runtime import get_runtime

logger = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5
BROADCAST_INTERVAL_S = 0.05

BUSY_HERE = "A reply is still being written. Stop it first, or wait for it to finish."


class _ReplyDeleted(Exception):
    """The chat was deleted while its reply was streaming: stop generating it."""


@dataclass(slots=True)
class RunningReply:
    conversation_id: int
    message: Message
    run: GenerationRun[ChatJob]
    task: asyncio.Task[None] | None = None
    began: bool = False  # the task's body is running (a task cancelled before that never runs it)
    stop_requested: bool = False
    finishing: bool = False
    started: float = field(default_factory=time.monotonic)
    # Streaming updates re-render only the reply's unfinished last block (whole re-renders are quadratic).
    renderer: IncrementalMarkdown = field(default_factory=IncrementalMarkdown)

    @property
    def engine(self) -> EngineClient:
        assert self.run.engine is not None
        return self.run.engine

    def upsert(self) -> dict[str, Any]:
        return events.upsert(self.message, body_html=self.renderer.render(self.message.content))


class ChatReplies:
    """The runtime's chat replies (one instance per runtime: chat_replies())."""

    def __init__(self, *, rate_limit_per_minute: int | None = None) -> None:
        if rate_limit_per_minute is None:
            rate_limit_per_minute = settings.MOONCAKE_CHAT_RATE_LIMIT_PER_MINUTE
        self.rate_limit_per_minute = rate_limit_per_minute
        self._running: dict[int, RunningReply] = {}
        self._reserved: set[int] = set()
        # Other replicas: the lease that says a reply runs, and stops sent from elsewhere.
        self.replicas = ReplyCoordinator(stop_local=self._stop_here)
        self.titles = TitleWriter()

    def running(self, conversation_id: int) -> RunningReply | None:
        return self._running.get(conversation_id)

    async def send(self, *, conversation: Conversation, content: str, nonce: str | None = None) -> Message:
        """Save the user's message, then start the reply; an error leaves nothing saved."""
        check_length(content)
        async with self._reservation(conversation):
            history = await database_sync_to_async(selectors.prompt_messages)(conversation=conversation)
            run = await admit_send(
                conversation, self.rate_limit_per_minute, [*history, {"role": "user", "content": content}]
            )
            async with _closed_on_error(run):
                message = await database_sync_to_async(services.user_message_create)(
                    conversation=conversation, content=content
                )
                await events.broadcast(
                    conversation.pk, events.upsert(message, nonce=nonce), events.conversation(conversation)
                )
                await self._start(conversation, run)
            return message

    async def edit(
        self, *, conversation: Conversation, message_id: int, content: str, nonce: str | None
    ) -> None:
        """Rewrite a user message, drop everything after it, and answer it again."""
        check_length(content)
        async with self._reservation(conversation):
            history = await database_sync_to_async(selectors.prompt_messages)(
                conversation=conversation, before_id=message_id
            )
            run = await admit_send(
                conversation, self.rate_limit_per_minute, [*history, {"role": "user", "content": content}]
            )
            async with _closed_on_error(run):
                message, removed = await database_sync_to_async(services.user_message_edit)(
                    conversation=conversation, message_id=message_id, content=content
                )
                await events.broadcast(
                    conversation.pk, events.remove(removed), events.upsert(message, nonce=nonce)
                )
                await self._start(conversation, run)

    async def regenerate(self, *, conversation: Conversation) -> None:
        """Replace the last reply with a new one."""
        async with self._reservation(conversation):
            last = await conversation.messages.order_by("-id").afirst()
            if last is None:
                raise InvalidRequest("There is nothing to regenerate.", code="invalid")
            before = last.pk if last.role == Message.Role.ASSISTANT else None
            history = await database_sync_to_async(selectors.prompt_messages)(
                conversation=conversation, before_id=before
            )
            run = await admit_send(conversation, self.rate_limit_per_minute, history)
            async with _closed_on_error(run):
                removed = await database_sync_to_async(services.last_reply_remove)(conversation=conversation)
                await events.broadcast(conversation.pk, events.remove(removed))
                await self._start(conversation, run)

    async def stop(self, conversation_id: int) -> bool:
        """Abort the chat's running reply. Here: returns once it is saved as stopped. On another replica:
        asks that one, which stops it within a step and tells every socket of the chat."""
        if conversation_id in self._running:
            return await self._stop_here(conversation_id)
        await self.replicas.request_stop(conversation_id)
        return False

    async def _stop_here(self, conversation_id: int) -> bool:
        reply = self._running.get(conversation_id)
        if reply is None or reply.task is None:
            return False
        reply.stop_requested = True
        # Cancelling the task closes its engine request (closing an engine iterator aborts it). A task not
        # yet begun sees stop_requested instead: cancelled before its first step, it would never run the
        # code that saves the reply and closes the run.
        if reply.began and not reply.finishing:
            reply.task.cancel()
        await asyncio.wait([reply.task])
        return True

    async def wait_idle(self) -> None:
        """Wait for every running reply and title job (tests and shutdown)."""
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        await self.titles.wait_idle()

    @contextlib.asynccontextmanager
    async def _reservation(self, conversation: Conversation) -> AsyncIterator[None]:
        # Claimed here before the first await so two quick sends cannot both start a reply; then the lease
        # makes it so on every replica. Unless a reply started, the lease is given back.
        if conversation.pk in self._reserved or conversation.pk in self._running:
            raise Conflict(BUSY_HERE, code="busy")
        self._reserved.add(conversation.pk)
        try:
            if not await self.replicas.take(conversation.pk):
                raise Conflict(BUSY_HERE, code="busy")
            try:
                yield
            finally:
                if conversation.pk not in self._running:
                    await asyncio.shield(self.replicas.give_back(conversation.pk))
        finally:
            self._reserved.discard(conversation.pk)

    async def _start(self, conversation: Conversation, run: GenerationRun[ChatJob]) -> None:
        """Create the reply and its task; from here the task owns the run (and closes it)."""
        message = await database_sync_to_async(services.assistant_message_create)(
            conversation=conversation, model=conversation.model or await _default_name()
        )
        reply = RunningReply(conversation.pk, message, run)
        self._running[conversation.pk] = reply
        try:
            await self.replicas.started(conversation.pk)
            await events.broadcast(conversation.pk, events.upsert(message), events.state(running=True))
        except BaseException:
            self._running.pop(conversation.pk, None)
            with contextlib.suppress(Exception):
                await self.replicas.finished(conversation.pk)
            raise
        reply.task = asyncio.create_task(self._run(reply, conversation))

    async def _run(self, reply: RunningReply, conversation: Conversation) -> None:
        reply.began = True
        run, message = reply.run, reply.message
        assert run.job is not None
        record = run.job.record
        message.prompt_tokens = len(run.job.prompts[0])
        last_save = last_send = time.monotonic()
        try:
            if reply.stop_requested:
                raise asyncio.CancelledError
            await run.submit()
            # aclosing: leaving the loop (a Stop, a deleted chat) closes the engine request at once.
            outputs = run.outputs()
            async with contextlib.aclosing(outputs):
                async for _, output in outputs:
                    completion = output.outputs[0]
                    message.content = completion.text
                    message.completion_tokens = len(completion.token_ids)
                    message.finish_reason = completion.finish_reason or ""
                    now = time.monotonic()
                    if now - last_save >= SAVE_INTERVAL_S:
                        if not await database_sync_to_async(services.assistant_message_save)(message=message):
                            raise _ReplyDeleted
                        last_save = now
                    if now - last_send >= BROADCAST_INTERVAL_S and not output.finished:
                        await events.broadcast(reply.conversation_id, reply.upsert())
                        last_send = now
            stopped = message.finish_reason == "abort"
            message.status = Message.Status.STOPPED if stopped else Message.Status.COMPLETE
        except (asyncio.CancelledError, _ReplyDeleted):
            reply.finishing = True  # A second Stop must not interrupt the abort or the final save.
            message.status, message.finish_reason = Message.Status.STOPPED, "abort"
            await run.abort()
        except Exception as exc:  # Any engine failure ends this reply, never the server.
            notice = errors.notice_for(exc, model=conversation.model)
            message.status, message.finish_reason, message.error = (
                Message.Status.ERROR,
                "error",
                notice.message,
            )
            record.status_code, record.error = notice.status, notice.message
        finally:
            # The row says what the user saw: a Stop is a served "abort", not an error.
            record.finish_reasons = [message.finish_reason] if message.finish_reason else []
            # Tokens into the limiter, the concurrency slot released and the request logged, however the
            # reply ended.
            await run.close()
        await self._finish(reply, conversation)

    async def _finish(self, reply: RunningReply, conversation: Conversation) -> None:
        reply.finishing = True  # From here a Stop must not interrupt the final save.
        message = reply.message
        elapsed = time.monotonic() - reply.started
        if message.completion_tokens and elapsed > 0:
            message.tokens_per_second = round(message.completion_tokens / elapsed, 2)
        try:
            await database_sync_to_async(services.assistant_message_save)(message=message)
        except Exception:  # Watchers must still hear that the reply ended.
            logger.exception("Saving the final state of reply %s failed", message.pk)
        finally:
            self._running.pop(reply.conversation_id, None)
            try:
                await self.replicas.finished(reply.conversation_id)
            except Exception:  # the lease lapses by itself; the chat is usable again after LEASE_S
                logger.exception("Giving back the lease of chat %s failed", reply.conversation_id)
        await events.broadcast(reply.conversation_id, events.upsert(message), events.state(running=False))
        if message.status == Message.Status.COMPLETE and not conversation.title_is_custom:
            self.titles.maybe_start(conversation_id=reply.conversation_id, engine=reply.engine)


@contextlib.asynccontextmanager
async def _closed_on_error(run: GenerationRun[ChatJob]) -> AsyncIterator[None]:
    """Until the reply's task takes the run over, any failure (saving the message, say) closes it."""
    try:
        yield
    except BaseException as exc:
        if run.job is not None:
            record_failure(run.job.record, exc)
        await asyncio.shield(run.close())
        raise


async def _default_name() -> str:
    return await asyncio.to_thread(selectors.default_model_name)


def chat_replies() -> ChatReplies:
    """This runtime's chat replies."""
    return get_runtime().service(ChatReplies)
