"""Model-written chat titles, generated in the server process right after the first exchange.

This is a background asyncio task rather than a Celery job: Celery workers never load models (CUDA and
forked pools do not mix), so a Celery task would only relay an HTTP call back into this process. Running
it here needs no broker, no internal endpoint and no shared secret, and still never delays the reply.
"""

from __future__ import annotations

import asyncio
import logging
import re

from channels.db import database_sync_to_async

from inference.api import EngineClient
from webapp.chat import events, services
from webapp.chat.models import Message
from webapp.core.sampling import sampling_params

logger = logging.getLogger(__name__)

TITLE_MAX_TOKENS = 16
MAX_TITLE_WORDS = 8
_INSTRUCTION = (
    "Write a short title, at most six words, for the conversation below. "
    "Reply with the title only, no quotes.\n\nUser: {user}\n\nAssistant: {assistant}"
)


def clean_title(text: str) -> str:
    """First line of the model's answer, without quotes, "Title:" prefixes or trailing punctuation."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    title = re.sub(r"^(title\s*:\s*|\d+[.)]\s+|[-*]\s+)", "", lines[0].strip(), flags=re.IGNORECASE)
    title = " ".join(title.split()[:MAX_TITLE_WORDS])
    return title.strip(" \"'`*#.:,;").strip()[:80]


def _first_exchange(conversation_id: int) -> tuple[str, str] | None:
    """The first user message and reply, or None unless the chat holds exactly that one exchange."""
    messages = list(Message.objects.filter(conversation_id=conversation_id).order_by("id")[:3])
    if len(messages) != 2 or [m.role for m in messages] != [Message.Role.USER, Message.Role.ASSISTANT]:
        return None
    return messages[0].content, messages[1].content


class TitleWriter:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def maybe_start(self, *, conversation_id: int, engine: EngineClient) -> None:
        task = asyncio.create_task(self._write(conversation_id, engine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _write(self, conversation_id: int, engine: EngineClient) -> None:
        exchange = await database_sync_to_async(_first_exchange)(conversation_id)
        if exchange is None:
            return
        prompt = _INSTRUCTION.format(user=exchange[0][:1000], assistant=exchange[1][:1000])
        text = ""
        try:
            messages = [{"role": "user", "content": prompt}]
            prompt_ids = await asyncio.to_thread(engine.apply_chat_template, messages)
            params = sampling_params(temperature=0.0, max_tokens=TITLE_MAX_TOKENS)
            async for output in engine.generate(prompt_ids, params):
                text = output.outputs[0].text
        except Exception:  # A missing title is cosmetic: keep the provisional one.
            logger.warning("title generation failed for chat %s", conversation_id, exc_info=True)
            return
        title = clean_title(text)
        stored = await database_sync_to_async(services.conversation_set_generated_title)(
            conversation_id=conversation_id, title=title
        )
        if stored:
            await events.broadcast(conversation_id, events.title(title))
