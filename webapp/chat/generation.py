"""Running chat replies: one asyncio task per reply, independent of any socket.

A reply keeps going (and is saved at least every second) when its tab closes; sockets only watch it
through the chat's Channels group. Only stop() aborts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from inference.api import EngineClient, EngineError, SamplingParams
from webapp.chat import errors, events, selectors, services
from webapp.chat.markdown_stream import IncrementalMarkdown
from webapp.chat.models import Conversation, Message
from webapp.chat.titles import TitleWriter
from webapp.core.engine import get_engine

logger = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5
BROADCAST_INTERVAL_S = 0.05


class _ReplyDeleted(Exception):
    """The chat was deleted while its reply was streaming: stop generating it."""


@dataclass(slots=True)
class RunningReply:
    conversation_id: int
    message: Message
    request_id: str
    engine: EngineClient
    task: asyncio.Task[None] | None = None
    finishing: bool = False
    started: float = field(default_factory=time.monotonic)
    # Streaming updates re-render only the reply's unfinished last block (whole re-renders are quadratic).
    renderer: IncrementalMarkdown = field(default_factory=IncrementalMarkdown)

    def upsert(self) -> dict[str, Any]:
        return events.upsert(self.message, body_html=self.renderer.render(self.message.content))


class GenerationService:
    def __init__(self, *, rate_limit_per_minute: int) -> None:
        self.rate_limit_per_minute = rate_limit_per_minute
        self._running: dict[int, RunningReply] = {}
        self._reserved: set[int] = set()
        self._recent: dict[int, deque[float]] = {}
        self.titles = TitleWriter()

    def running(self, conversation_id: int) -> RunningReply | None:
        return self._running.get(conversation_id)

    async def send(self, *, conversation: Conversation, content: str, nonce: str | None = None) -> Message:
        """Save the user's message, then start the reply; ChatError leaves nothing saved."""
        _check_length(content)
        async with self._reservation(conversation):
            engine = await self._engine(conversation)
            history = await database_sync_to_async(selectors.prompt_messages)(conversation=conversation)
            prompt_ids = await self._check_prompt(engine, [*history, {"role": "user", "content": content}])
            try:
                message = await database_sync_to_async(services.user_message_create)(
                    conversation=conversation, content=content
                )
            except ValueError as exc:
                raise errors.ChatError("invalid", str(exc)) from exc
            await events.broadcast(
                conversation.pk, events.upsert(message, nonce=nonce), events.conversation(conversation)
            )
            await self._start(conversation, engine, prompt_ids)
            return message

    async def edit(
        self, *, conversation: Conversation, message_id: int, content: str, nonce: str | None
    ) -> None:
        """Rewrite a user message, drop everything after it, and answer it again."""
        _check_length(content)
        async with self._reservation(conversation):
            engine = await self._engine(conversation)
            history = await database_sync_to_async(selectors.prompt_messages)(
                conversation=conversation, before_id=message_id
            )
            prompt_ids = await self._check_prompt(engine, [*history, {"role": "user", "content": content}])
            try:
                message, removed = await database_sync_to_async(services.user_message_edit)(
                    conversation=conversation, message_id=message_id, content=content
                )
            except ValueError as exc:
                raise errors.ChatError("invalid", str(exc)) from exc
            await events.broadcast(
                conversation.pk, events.remove(removed), events.upsert(message, nonce=nonce)
            )
            await self._start(conversation, engine, prompt_ids)

    async def regenerate(self, *, conversation: Conversation) -> None:
        """Replace the last reply with a new one."""
        async with self._reservation(conversation):
            engine = await self._engine(conversation)
            last = await conversation.messages.order_by("-id").afirst()
            if last is None:
                raise errors.ChatError("invalid", "There is nothing to regenerate.")
            before = last.pk if last.role == Message.Role.ASSISTANT else None
            history = await database_sync_to_async(selectors.prompt_messages)(
                conversation=conversation, before_id=before
            )
            prompt_ids = await self._check_prompt(engine, history)
            try:
                removed = await database_sync_to_async(services.last_reply_remove)(conversation=conversation)
            except ValueError as exc:
                raise errors.ChatError("invalid", str(exc)) from exc
            await events.broadcast(conversation.pk, events.remove(removed))
            await self._start(conversation, engine, prompt_ids)

    async def stop(self, conversation_id: int) -> bool:
        """Abort the chat's running reply now; returns once it is saved as stopped."""
        reply = self._running.get(conversation_id)
        if reply is None or reply.task is None:
            return False
        if not reply.finishing:
            reply.task.cancel()
        with contextlib.suppress(Exception):
            await reply.engine.abort(reply.request_id)
        await asyncio.wait([reply.task])
        return True

    async def wait_idle(self) -> None:
        """Wait for every running reply and title job (tests and shutdown)."""
        tasks = [r.task for r in self._running.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks)
        await self.titles.wait_idle()

    @contextlib.asynccontextmanager
    async def _reservation(self, conversation: Conversation) -> Any:
        # Claimed before the first await so two quick sends cannot both start a reply.
        if conversation.pk in self._reserved or conversation.pk in self._running:
            raise errors.BUSY_HERE
        self._check_rate(conversation.user_id)
        self._reserved.add(conversation.pk)
        try:
            yield
        finally:
            self._reserved.discard(conversation.pk)

    def _check_rate(self, user_id: int) -> None:
        now = time.monotonic()
        recent = self._recent.setdefault(user_id, deque())
        while recent and now - recent[0] > 60.0:
            recent.popleft()
        if len(recent) >= self.rate_limit_per_minute:
            raise errors.RATE_LIMITED
        recent.append(now)

    async def _engine(self, conversation: Conversation) -> EngineClient:
        try:
            return await get_engine(conversation.model or None)
        except EngineError as exc:
            loading = await asyncio.to_thread(selectors.model_is_loading, conversation.model)
            raise errors.from_engine(exc, model=conversation.model, loading=loading) from exc

    async def _check_prompt(self, engine: EngineClient, messages: list[dict[str, str]]) -> list[int]:
        # Templating and tokenizing a long history is CPU work: keep it off the event loop.
        prompt_ids: list[int] = list(await asyncio.to_thread(engine.apply_chat_template, messages))
        if len(prompt_ids) >= engine.max_model_len:
            raise errors.too_long(len(prompt_ids), engine.max_model_len)
        return prompt_ids

    async def _start(self, conversation: Conversation, engine: EngineClient, prompt_ids: list[int]) -> None:
        try:
            params = SamplingParams(
                temperature=conversation.temperature,
                top_p=conversation.top_p,
                max_tokens=min(conversation.max_tokens, max(1, engine.max_model_len - len(prompt_ids))),
            )
        except ValueError as exc:
            raise errors.ChatError("invalid", f"Check this chat's settings: {exc}") from exc
        message = await database_sync_to_async(services.assistant_message_create)(
            conversation=conversation, model=conversation.model or await _default_name()
        )
        reply = RunningReply(conversation.pk, message, f"chat-{uuid.uuid4().hex}", engine)
        self._running[conversation.pk] = reply
        await events.broadcast(conversation.pk, events.upsert(message), events.state(running=True))
        reply.task = asyncio.create_task(self._run(reply, prompt_ids, params, conversation))

    async def _run(
        self, reply: RunningReply, prompt_ids: list[int], params: SamplingParams, conversation: Conversation
    ) -> None:
        message = reply.message
        message.prompt_tokens = len(prompt_ids)
        last_save = last_send = time.monotonic()
        try:
            stream = reply.engine.generate(prompt_ids, params, request_id=reply.request_id)
            async for output in stream:
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
            message.status, message.finish_reason = Message.Status.STOPPED, "abort"
            with contextlib.suppress(Exception):
                await reply.engine.abort(reply.request_id)
        except Exception as exc:  # Any engine failure ends this reply, never the server.
            chat_error = errors.from_engine(exc, model=conversation.model)
            message.status, message.finish_reason, message.error = (
                Message.Status.ERROR,
                "error",
                chat_error.message,
            )
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
        await events.broadcast(reply.conversation_id, events.upsert(message), events.state(running=False))
        if message.status == Message.Status.COMPLETE and not conversation.title_is_custom:
            self.titles.maybe_start(conversation_id=reply.conversation_id, engine=reply.engine)


def _check_length(content: str) -> None:
    # A character count first: an oversized message must never reach the tokenizer or chat template.
    if len(content) > services.MAX_MESSAGE_CHARS and len(content.strip()) > services.MAX_MESSAGE_CHARS:
        raise errors.ChatError("invalid", f"Message is longer than {services.MAX_MESSAGE_CHARS} characters.")


async def _default_name() -> str:
    return await asyncio.to_thread(selectors.default_model_name)


_service: GenerationService | None = None


def get_generation_service() -> GenerationService:
    global _service
    if _service is None:
        limit = int(getattr(settings, "MOONCAKE_CHAT_RATE_LIMIT_PER_MINUTE", 30))
        _service = GenerationService(rate_limit_per_minute=limit)
    return _service


def reset_generation_service() -> None:
    """Forget running state; tests call this between event loops."""
    global _service
    _service = None
