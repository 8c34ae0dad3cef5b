"""Accounting for one finished request, the API's or the chat's: the request log row and the daily totals.

Both channels go through request_record_save, so a chat reply counts exactly as an API request does;
the row's source says which one it was.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.db import transaction

from webapp.accounts.models import RequestLog
from webapp.accounts.services import usage_record
from webapp.core.engine_settings import log_prompts_enabled
from webapp.core.errors import MooncakeError
from webapp.core.request_id import get_request_id
from webapp.serving.generation import Usage

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class RequestRecord:
    """Filled in while a request runs; written once when it ends."""

    endpoint: str
    source: str = RequestLog.Source.API
    stream: bool = False
    model: str = ""
    status_code: int = 200
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    duration_s: float = 0.0
    finish_reasons: list[str] = field(default_factory=list)
    error: str = ""
    prompt_text: str = ""
    # Taken when the record is made, inside the request: a stream's row is written after the view returned.
    request_id: str = field(default_factory=lambda: get_request_id() or "")

    def take_usage(self, usage: Usage) -> None:
        """Copy a closed run's counts; finish reasons the channel already set (the chat's) are kept."""
        self.prompt_tokens = usage.prompt_tokens
        self.completion_tokens = usage.completion_tokens
        self.ttft_s = usage.ttft_s
        self.duration_s = usage.duration_s
        self.finish_reasons = self.finish_reasons or list(usage.finish_reasons)

    def fail_with(self, exc: BaseException) -> None:
        """Mark the row with `exc`: its status and message for an error of ours; 499 for a cancelled
        request (a lost client, a chat send cancelled), else 500 with only the exception's type."""
        if isinstance(exc, MooncakeError):
            self.status_code, self.error = exc.status, exc.message
        else:
            self.status_code = 499 if isinstance(exc, asyncio.CancelledError) else 500
            self.error = type(exc).__name__


def _storable(text: str) -> str:
    """`text` as the database can store it: a lone surrogate (from a client's JSON) becomes "\\ud800"."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _write(user_id: int | None, api_key_id: int | None, record: RequestRecord) -> None:
    # The console's row, not this process's settings: an admin's switch reaches every replica.
    log_prompts = log_prompts_enabled()
    with transaction.atomic():
        RequestLog.objects.create(
            user_id=user_id,
            api_key_id=api_key_id,
            source=record.source,
            request_id=record.request_id[:128],
            endpoint=record.endpoint,
            model=_storable(record.model)[:200],
            stream=record.stream,
            status_code=record.status_code,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            ttft_s=record.ttft_s,
            duration_s=record.duration_s,
            finish_reason=",".join(sorted(set(record.finish_reasons)))[:32],
            error=_storable(record.error)[:2000],
            prompt_text=_storable(record.prompt_text) if log_prompts else "",
        )
        usage_record(
            user_id=user_id,
            api_key_id=api_key_id,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            error=record.status_code >= 400,
            model=_storable(record.model),
            source=record.source,
        )


async def request_record_save(
    *, record: RequestRecord, user_id: int | None, api_key_id: int | None = None
) -> None:
    """Persist the record for the user (and key: None for chat and anonymous calls); accounting never
    turns a served answer into an error: failures are logged."""
    try:
        await sync_to_async(_write)(user_id, api_key_id, record)
    except Exception:
        logger.exception("could not record %s usage for %s", record.source, record.endpoint)
