"""Running chat replies: one asyncio task per reply, independent of any socket.

Over 300 lines: every action that writes a reply (send, edit, regenerate, continue) and branch switching
share one reservation and one hand-over of the run to the reply's task; kept together so the rules on who
closes a run stay in one place.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings

from inference.api import EngineClient
from webapp.chat import errors, events, selectors, services
from webapp.chat.admission import ChatJob, ReplySettings, admit_send, check_length
from webapp.chat.markdown_stream import IncrementalMarkdown
from webapp.chat.models import Conversation, Message
from webapp.chat.replicas import ReplyCoordinator
from webapp.chat.titles import TitleWriter
from webapp.core.errors import Conflict
from webapp.serving.generation import GenerationRun
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)
T = TypeVar("T")

SAVE_INTERVAL_S = 0.5
BROADCAST_INTERVAL_S = 0.05

BUSY_HERE = "A reply is still being written. Stop it first, or wait for it to finish."


class _EndedElsewhere(Exception):
    """The chat was deleted, or Stop pressed on another replica, while its reply streamed: stop it."""


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
    # Continue: the text and tokens the reply had; the engine's output is appended to them.
    base_text: str = ""
    base_tokens: int = 0

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
        """Save the user's message at the end of the thread on screen, then start the reply; an error leaves
        nothing saved."""
        check_length(content)
        async with self._reservation(conversation):
            path = await _db(selectors.active_path)(conversation=conversation)
            history = selectors.prompt_messages(conversation=conversation, path=path)
            run = await admit_send(
                conversation, self.rate_limit_per_minute, [*history, {"role": "user", "content": content}]
            )
            async with _closed_on_error(run):
                message = await _db(_user_message)(conversation, content, path[-1] if path else None)
                await events.broadcast(
                    conversation.pk, events.upsert(message, nonce=nonce), events.conversation(conversation)
                )
                await self._start(conversation, run, parent=message)
            return message

    async def edit(
        self, *, conversation: Conversation, message_id: int, content: str, nonce: str | None
    ) -> None:
        """Add a new version of a user message beside the old one, and answer it."""
        check_length(content)
        async with self._reservation(conversation):
            original = await _db(selectors.message_get)(
                conversation=conversation, message_id=message_id, role=Message.Role.USER
            )
            history = await _db(_history_before)(conversation, original)
            run = await admit_send(
                conversation, self.rate_limit_per_minute, [*history, {"role": "user", "content": content}]
            )
            async with _closed_on_error(run):
                message = await _db(services.user_message_edit)(
                    conversation=conversation, message_id=message_id, content=content
                )
                await self._start(conversation, run, parent=message, nonce=nonce or "")

    async def regenerate(self, *, conversation: Conversation, message_id: int | None = None) -> None:
        """A new version of a reply (by default the thread's last), beside the old one; a user message's
        id answers it with a new reply."""
        async with self._reservation(conversation):
            parent = await _db(selectors.regenerate_target)(conversation=conversation, message_id=message_id)
            history = await _db(selectors.prompt_through)(conversation=conversation, message=parent)
            run = await admit_send(conversation, self.rate_limit_per_minute, history)
            async with _closed_on_error(run):
                await self._start(conversation, run, parent=parent, nonce="")

    async def continue_reply(self, *, conversation: Conversation, message_id: int) -> None:
        """Go on writing a reply that stopped at its length limit, into the same message, with the model and
        sampling settings it was written with."""
        async with self._reservation(conversation):
            reply = await _db(selectors.continuable_reply)(conversation=conversation, message_id=message_id)
            history = await _db(_history_before)(conversation, reply)
            settings = ReplySettings.of(conversation, reply)
            run = await admit_send(
                conversation, self.rate_limit_per_minute, history, settings=settings, partial=reply.content
            )
            async with _closed_on_error(run):
                await self._start(conversation, run, parent=None, reply=reply)

    async def switch(self, *, conversation: Conversation, message_id: int) -> None:
        """Show another version of a message, in every tab; not while a reply is being written."""
        async with self._reservation(conversation):
            await _db(services.branch_select)(conversation=conversation, message_id=message_id)
            await events.broadcast(conversation.pk, await _db(events.thread)(conversation))

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

    async def settle(self, *, grace: float) -> None:
        """Give the running replies `grace` seconds to end, stop those still going, then wait for every reply
        and title: afterwards nothing of this service writes (a test's teardown, before the database goes)."""
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for conversation_id in list(self._running):
            await self._stop_here(conversation_id)
        await self.wait_idle()

    @contextlib.asynccontextmanager
    async def _reservation(self, conversation: Conversation) -> AsyncIterator[None]:
        # Claimed here before the first await so two quick sends cannot both start a reply; then the lease
        # makes it so on every replica. Unless a reply started, the lease is given back.
        if conversation.pk in self._reserved or conversation.pk in self._running:
            raise Conflict(BUSY_HERE, code="busy")
        self._reserved.add(conversation.pk)
        try:
            until = await self.replicas.take(conversation.pk)
            if until is None:
                raise Conflict(BUSY_HERE, code="busy")
            # This copy of the row was read before the lease was taken: without the new end, the thread
            # rendered for the new reply would show it "stopped" until its first token.
            conversation.reply_lease_until = until
            try:
                yield
            finally:
                if conversation.pk not in self._running:
                    await asyncio.shield(self.replicas.give_back(conversation.pk))
        finally:
            self._reserved.discard(conversation.pk)

    async def _start(
        self,
        conversation: Conversation,
        run: GenerationRun[ChatJob],
        *,
        parent: Message | None,
        reply: Message | None = None,
        nonce: str | None = None,
    ) -> None:
        """Create the reply under `parent` (or reopen `reply`, for Continue) and its task; from here the
        task owns the run (and closes it). A `nonce` (even "") sends the whole thread: a new version."""
        assert run.job is not None
        if reply is None:
            message = await _db(_reply_message)(conversation, parent, run.job.record.model)
            base_text, base_tokens = "", 0
        else:
            message = await _db(services.reply_reopen)(message=reply)
            base_text, base_tokens = reply.content, reply.completion_tokens or 0
        running = RunningReply(conversation.pk, message, run, base_text=base_text, base_tokens=base_tokens)
        self._running[conversation.pk] = running
        try:
            await self.replicas.started(conversation.pk)
            shown = (
                events.upsert(message)
                if nonce is None
                else await _db(events.thread)(conversation, nonce=nonce)
            )
            await events.broadcast(conversation.pk, shown, events.state(running=True))
        except BaseException:
            self._running.pop(conversation.pk, None)
            with contextlib.suppress(Exception):
                await self.replicas.finished(conversation.pk)
            raise
        running.task = asyncio.create_task(self._run(running, conversation))

    async def _run(self, reply: RunningReply, conversation: Conversation) -> None:
        reply.began = True
        run, message = reply.run, reply.message
        assert run.job is not None
        record = run.job.record
        if not (reply.base_text or reply.base_tokens):  # A continued reply keeps its first prompt size.
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
                    message.content = reply.base_text + completion.text
                    message.completion_tokens = reply.base_tokens + len(completion.token_ids)
                    message.finish_reason = completion.finish_reason or ""
                    now = time.monotonic()
                    if now - last_save >= SAVE_INTERVAL_S:
                        if not await database_sync_to_async(services.reply_progress_save)(message=message):
                            raise _EndedElsewhere
                        last_save = now
                    if now - last_send >= BROADCAST_INTERVAL_S and not output.finished:
                        await events.broadcast(reply.conversation_id, reply.upsert())
                        last_send = now
            stopped = message.finish_reason == "abort"
            message.status = Message.Status.STOPPED if stopped else Message.Status.COMPLETE
        except (asyncio.CancelledError, _EndedElsewhere):
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
        written = (message.completion_tokens or 0) - reply.base_tokens
        if written > 0 and elapsed > 0:
            message.tokens_per_second = round(written / elapsed, 2)
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
            self.titles.maybe_start(
                conversation_id=reply.conversation_id,
                user_id=conversation.user_id,
                model=reply.run.job.record.model if reply.run.job else conversation.model,
            )


@contextlib.asynccontextmanager
async def _closed_on_error(run: GenerationRun[ChatJob]) -> AsyncIterator[None]:
    """Until the reply's task takes the run over, any failure (saving the message, say) closes it."""
    try:
        yield
    except BaseException as exc:
        if run.job is not None:
            run.job.record.fail_with(exc)
        await asyncio.shield(run.close())
        raise


def _db(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    return database_sync_to_async(fn)


def _history_before(conversation: Conversation, message: Message) -> list[dict[str, str]]:
    return selectors.prompt_through(conversation=conversation, message=message.parent)


def _user_message(conversation: Conversation, content: str, parent: Message | None) -> Message:
    message = services.user_message_create(conversation=conversation, content=content, parent=parent)
    return selectors.with_branch(message)


def _reply_message(conversation: Conversation, parent: Message | None, model: str) -> Message:
    message = services.assistant_message_create(
        conversation=conversation,
        parent=parent,
        model=model or conversation.model or selectors.default_model_name(),
        temperature=conversation.temperature,
        top_p=conversation.top_p,
        max_tokens=conversation.max_tokens,
    )
    return selectors.with_branch(message)


def chat_replies() -> ChatReplies:
    """This runtime's chat replies."""
    return get_runtime().service(ChatReplies)
