"""What a chat send must pass before anything is saved: the limits, then the template and the prompt check.

The same generation service the API uses admits it: the user's own limits (set in the console) and the
chat's per-minute cap are checked before any work, then the history is templated and checked off the
event loop.

Every admitted send is accounted as an API request is (webapp.accounts.request_log): one request-log row
with source "chat" and the user's daily totals, written when the run closes however the reply ended; a
send the service refuses (a limit, no model, too long a prompt) is logged with its error status.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from channels.db import database_sync_to_async

from inference.api import EngineClient
from webapp.accounts.limits import admission_checks
from webapp.accounts.models import RequestLog
from webapp.accounts.request_log import RequestRecord, request_record_save
from webapp.api.services.models import model_name
from webapp.chat import selectors, services
from webapp.chat.model_loading import ensure_model_ready
from webapp.chat.models import Conversation, Message
from webapp.core.errors import MODEL_RETRY_AFTER_S, InvalidRequest, MooncakeError, Unavailable
from webapp.serving.chat_context import extend_chat_prompt
from webapp.serving.generation import GenerationRequest, GenerationRun, Prepared
from webapp.serving.limits import Limits
from webapp.serving.model_access import viewer_for_user
from webapp.serving.prompts import check_prompt, render_chat, render_continuation
from webapp.serving.runtime import get_runtime
from webapp.serving.sampling import sampling_params

ENDPOINT = "chat"


def _new_record() -> RequestRecord:
    return RequestRecord(endpoint=ENDPOINT, source=RequestLog.Source.CHAT, stream=True)


@dataclass(slots=True)
class ChatJob(Prepared):
    """A prepared reply and its request-log row, which the reply's task fills in as it ends."""

    record: RequestRecord = field(default_factory=_new_record)


@dataclass(frozen=True, slots=True)
class ReplySettings:
    """The model and sampling a reply is written with: the chat's, or (for Continue) the reply's own."""

    model: str
    temperature: float
    top_p: float
    max_tokens: int

    @classmethod
    def of(cls, conversation: Conversation, message: Message | None = None) -> ReplySettings:
        if message is None:
            return cls(
                conversation.model, conversation.temperature, conversation.top_p, conversation.max_tokens
            )
        return cls(
            message.model or conversation.model,
            conversation.temperature if message.temperature is None else message.temperature,
            conversation.top_p if message.top_p is None else message.top_p,
            conversation.max_tokens if message.max_tokens is None else message.max_tokens,
        )


def check_length(content: str) -> None:
    # A character count first: an oversized message must never reach the tokenizer or chat template.
    if len(content) > services.MAX_MESSAGE_CHARS and len(content.strip()) > services.MAX_MESSAGE_CHARS:
        raise InvalidRequest(
            f"Message is longer than {services.MAX_MESSAGE_CHARS} characters.", code="invalid"
        )


async def admit_send(
    conversation: Conversation,
    rate_limit_per_minute: int,
    messages: list[dict[str, str]],
    *,
    settings: ReplySettings | None = None,
    partial: str | None = None,
) -> GenerationRun[ChatJob]:
    """Admit the send (the user's limits and the chat's cap), then template and check the prompt.
    `partial`: the text of a reply to continue, which the prompt ends with inside the assistant's turn."""
    user_id = conversation.user_id
    use = settings or ReplySettings.of(conversation)
    viewer = await database_sync_to_async(viewer_for_user)(user_id=user_id)
    record = _new_record()
    record.model = use.model
    record.prompt_text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")

    async def prepare(engine: EngineClient) -> ChatJob:
        record.model = model_name(engine, use.model or None)
        # Templating and tokenizing a long history is CPU work: keep it off the event loop.
        # Other apps' context (the chat's documents: webapp.documents) joins the messages first.
        prompt = await extend_chat_prompt(conversation=conversation, messages=messages, engine=engine)
        if partial is None:
            ids = await asyncio.to_thread(render_chat, engine, prompt)
        else:
            ids = await asyncio.to_thread(render_continuation, engine, prompt, partial)
        remaining = check_prompt(engine, ids, max_tokens=None, param="messages")
        params = sampling_params(
            temperature=use.temperature,
            top_p=use.top_p,
            max_tokens=min(use.max_tokens, remaining),
            explain="Check this chat's settings: ",
            code="invalid",
        )
        return ChatJob(prompts=[ids], params=params, record=record)

    request = GenerationRequest(
        endpoint=ENDPOINT,
        model=use.model or None,
        limit_checks=[(("chat", user_id), Limits(requests_per_minute=rate_limit_per_minute))],
        prepare=prepare,
        viewer=viewer,
    )
    try:
        # The user's own limits and their groups' (webapp.accounts.limits), as an API key's user gets;
        # a used-up daily quota refuses the send here, logged like any refusal.
        own = await database_sync_to_async(admission_checks)(user_id=user_id)
        request.limit_checks = [*own, *request.limit_checks]
        # A model that is not loaded loads now, memory allowing (the chat shows it loading meanwhile);
        # otherwise the refusal names the model and why.
        await ensure_model_ready(conversation=conversation, model=use.model, viewer=viewer)
        run = await get_runtime().generation.prepare(request)
    except BaseException as exc:
        error = await _refusal(exc, use.model)
        record.fail_with(error)
        await asyncio.shield(request_record_save(record=record, user_id=user_id))
        if error is exc:
            raise
        raise error from exc

    async def account(closed: GenerationRun[ChatJob]) -> None:
        record.take_usage(closed.usage)
        await request_record_save(record=record, user_id=user_id)

    run.on_close(account)
    return run


async def _refusal(exc: BaseException, model: str) -> BaseException:
    """The error a refused send raises: "no model" while the chat's model is loading means "wait"."""
    if (
        isinstance(exc, MooncakeError)
        and exc.code == "model_not_loaded"
        and await asyncio.to_thread(selectors.model_is_loading, model)
    ):
        return Unavailable(
            "The model is still loading; retry shortly.",
            code="model_loading",
            retry_after=MODEL_RETRY_AFTER_S,
        )
    return exc
