"""Model-written chat titles, generated in the server process right after the first exchange.

This is a background asyncio task rather than a Celery job: Celery workers never load models (CUDA and
forked pools do not mix), so a Celery task would only relay an HTTP call back into this process. Running
it here needs no broker, no internal endpoint and no shared secret, and still never delays the reply.

A title is work the server asks for on the user's behalf, so it goes through the one generation service
as a reply does: the user's token limits and daily quota admit it and its tokens count toward them, and
it is logged (endpoint "chat.title") and summed into the user's usage. It is not one of the user's
requests per minute and holds no concurrency slot, so it never refuses the user's next send. A title
that is refused, or fails, leaves the provisional one.
"""

from __future__ import annotations

import asyncio
import logging
import re

from channels.db import database_sync_to_async

from inference.api import EngineClient
from webapp.accounts.limits import admission_checks
from webapp.accounts.models import RequestLog
from webapp.accounts.request_log import RequestRecord, request_record_save
from webapp.api.services.models import model_name
from webapp.chat import events, services
from webapp.chat.models import Message
from webapp.core.errors import MooncakeError
from webapp.serving.generation import GenerationRequest, GenerationRun, Prepared
from webapp.serving.limits import Bucket, Limits
from webapp.serving.model_access import Viewer, viewer_for_user
from webapp.serving.prompts import check_prompt, render_chat
from webapp.serving.runtime import get_runtime
from webapp.serving.sampling import sampling_params

logger = logging.getLogger(__name__)

ENDPOINT = "chat.title"
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

    def maybe_start(self, *, conversation_id: int, user_id: int, model: str) -> None:
        """Title the chat with `model` (the one that wrote its first reply) if it holds just that exchange."""
        task = asyncio.create_task(self._write(conversation_id, user_id, model))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _write(self, conversation_id: int, user_id: int, model: str) -> None:
        exchange = await database_sync_to_async(_first_exchange)(conversation_id)
        if exchange is None:
            return
        prompt = _INSTRUCTION.format(user=exchange[0][:1000], assistant=exchange[1][:1000])
        record = RequestRecord(
            endpoint=ENDPOINT, source=RequestLog.Source.CHAT, model=model, prompt_text=prompt
        )

        async def prepare(engine: EngineClient) -> Prepared:
            record.model = model_name(engine, model or None)
            ids = await asyncio.to_thread(render_chat, engine, [{"role": "user", "content": prompt}])
            check_prompt(engine, ids, max_tokens=TITLE_MAX_TOKENS, param="messages")
            return Prepared(
                prompts=[ids], params=sampling_params(temperature=0.0, max_tokens=TITLE_MAX_TOKENS)
            )

        try:
            checks, viewer = await database_sync_to_async(_admission)(user_id)
            request = GenerationRequest(
                endpoint=ENDPOINT,
                model=model or None,
                limit_checks=checks,
                prepare=prepare,
                sequences=0,
                counted=False,
                viewer=viewer,
            )
            run: GenerationRun[Prepared] = await get_runtime().generation.prepare(request)
        except MooncakeError as exc:  # a limit, the quota, the model gone: not worth a log row
            logger.info("no title for chat %s: %s", conversation_id, exc.message)
            return
        except Exception:  # A missing title is cosmetic: keep the provisional one.
            logger.warning("title generation failed for chat %s", conversation_id, exc_info=True)
            return

        async def account(closed: GenerationRun[Prepared]) -> None:
            record.take_usage(closed.usage)
            await request_record_save(record=record, user_id=user_id)

        run.on_close(account)
        text = ""
        try:
            await run.submit()
            async for _, output in run.outputs():
                text = output.outputs[0].text
        except Exception as exc:
            record.fail_with(exc)
            logger.warning("title generation failed for chat %s", conversation_id, exc_info=True)
        finally:
            await asyncio.shield(run.close())
        if record.status_code != 200:
            return
        title = clean_title(text)
        stored = await database_sync_to_async(services.conversation_set_generated_title)(
            conversation_id=conversation_id, title=title
        )
        if stored:
            await events.broadcast(conversation_id, events.title(title))


def _admission(user_id: int) -> tuple[list[tuple[Bucket, Limits]], Viewer]:
    """The user's token limits (a used-up daily quota raises its 429 here) and whose model access applies."""
    checks = [
        (bucket, Limits(tokens_per_minute=limits.tokens_per_minute))
        for bucket, limits in admission_checks(user_id=user_id)
    ]
    return checks, viewer_for_user(user_id=user_id)
