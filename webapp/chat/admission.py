"""What a chat send must pass before anything is saved: the limits, then the template and the prompt check.

The same generation service the API uses admits it: the user's own limits (set in the console) and the
chat's per-minute cap are checked before any work, then the history is templated and checked off the
event loop.
"""

from __future__ import annotations

import asyncio

from channels.db import database_sync_to_async

from inference.api import EngineClient, SamplingParams
from webapp.accounts.selectors import user_limits
from webapp.chat import selectors, services
from webapp.chat.models import Conversation
from webapp.core.errors import MODEL_RETRY_AFTER_S, InvalidRequest, MooncakeError, Unavailable
from webapp.core.generation import GenerationRequest, GenerationRun, Prepared
from webapp.core.limits import Limits
from webapp.core.prompts import check_prompt, render_chat
from webapp.core.runtime import get_runtime


def check_length(content: str) -> None:
    # A character count first: an oversized message must never reach the tokenizer or chat template.
    if len(content) > services.MAX_MESSAGE_CHARS and len(content.strip()) > services.MAX_MESSAGE_CHARS:
        raise InvalidRequest(
            f"Message is longer than {services.MAX_MESSAGE_CHARS} characters.", code="invalid"
        )


async def admit_send(
    conversation: Conversation, rate_limit_per_minute: int, messages: list[dict[str, str]]
) -> GenerationRun[Prepared]:
    """Admit the send (the user's limits and the chat's cap), then template and check the prompt."""
    user_id = conversation.user_id
    own = await database_sync_to_async(user_limits)(user_id=user_id)

    async def prepare(engine: EngineClient) -> Prepared:
        # Templating and tokenizing a long history is CPU work: keep it off the event loop.
        ids = await asyncio.to_thread(render_chat, engine, messages)
        remaining = check_prompt(engine, ids, max_tokens=None, param="messages")
        try:
            params = SamplingParams(
                temperature=conversation.temperature,
                top_p=conversation.top_p,
                max_tokens=min(conversation.max_tokens, remaining),
            )
        except ValueError as exc:
            raise InvalidRequest(f"Check this chat's settings: {exc}", code="invalid") from exc
        return Prepared(prompts=[ids], params=params)

    request = GenerationRequest(
        endpoint="chat",
        model=conversation.model or None,
        limit_checks=[
            (("user", user_id), own),
            (("chat", user_id), Limits(requests_per_minute=rate_limit_per_minute)),
        ],
        prepare=prepare,
    )
    try:
        return await get_runtime().generation.prepare(request)
    except MooncakeError as exc:
        if exc.code == "model_not_loaded" and await asyncio.to_thread(
            selectors.model_is_loading, conversation.model
        ):
            raise Unavailable(
                "The model is still loading; retry shortly.",
                code="model_loading",
                retry_after=MODEL_RETRY_AFTER_S,
            ) from exc
        raise
