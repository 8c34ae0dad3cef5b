"""Stored responses: saved with their input items, read back by their owner only, expiring after
settings.MOONCAKE_RESPONSES_DAYS. Synchronous ORM code; async callers go through sync_to_async."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from webapp.api.models import StoredResponse
from webapp.api.services.responses_render import TERMINAL, ResponseSpec, error_object, response_object
from webapp.core.errors import InvalidRequest, NotFound
from webapp.serving.streams import request_timeout_s

logger = logging.getLogger(__name__)

DEFAULT_DAYS = 30
# Input items and the Response object of one row, serialized: request bodies are bounded before this
# (webapp.core.body_limits) and outputs by the model's context, so this only stops the unexpected.
MAX_STORED_BYTES = 8 * 1024 * 1024
# previous_response_id hops followed when a conversation is rebuilt; chat's message cap bounds it too.
MAX_CHAIN = 1024
BATCH = 5000  # rows per delete when pruning, as for the request log
ORPHAN_GRACE_S = 120.0  # past the request time limit: a background response still active then has no server
ACTIVE = (StoredResponse.Status.QUEUED, StoredResponse.Status.IN_PROGRESS)


def keep_days() -> int:
    return int(getattr(settings, "MOONCAKE_RESPONSES_DAYS", DEFAULT_DAYS))


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def check_storable(items: list[dict[str, Any]]) -> None:
    if _size(items) > MAX_STORED_BYTES:
        raise InvalidRequest(f"input is over {MAX_STORED_BYTES} bytes: too large to store.", param="input")


def _visible(user_id: int | None) -> QuerySet[StoredResponse]:
    # Anonymous callers (auth off) see the anonymous rows only; a user never sees another's.
    rows = StoredResponse.objects.filter(expires_at__gt=timezone.now())
    return rows.filter(user__isnull=True) if user_id is None else rows.filter(user_id=user_id)


def not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id", code="not_found")


def stored_get(response_id: str, user_id: int | None) -> StoredResponse:
    row = _visible(user_id).filter(id=response_id).first()
    if row is None:
        raise not_found(response_id)
    return row


def _bounded(spec: ResponseSpec, body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    if _size(body) + _size(items) <= MAX_STORED_BYTES:
        return body
    logger.warning("response %s is too large to store whole; stored without its output", spec.id)
    return response_object(
        spec, status="failed", error=error_object("too_large", "The output was too large to store.")
    )


def stored_save(
    spec: ResponseSpec, *, user_id: int | None, items: list[dict[str, Any]], body: dict[str, Any]
) -> None:
    """Create or replace the row of `spec`'s response."""
    body = _bounded(spec, body, items)
    StoredResponse.objects.update_or_create(
        id=spec.id,
        defaults={
            "user_id": user_id,
            "expires_at": timezone.now() + dt.timedelta(days=keep_days()),
            "status": body["status"],
            "background": bool(spec.request.get("background")),
            "previous_response_id": spec.request.get("previous_response_id") or "",
            "input_items": items,
            "body": body,
        },
    )


def stored_finish(spec: ResponseSpec, body: dict[str, Any], items: list[dict[str, Any]]) -> bool:
    """A background response's result, unless it was cancelled (or deleted) meanwhile; True if written."""
    body = _bounded(spec, body, items)
    updated = StoredResponse.objects.filter(id=spec.id, status__in=ACTIVE).update(
        status=body["status"], body=body
    )
    return updated > 0


def stored_cancel(response_id: str, user_id: int | None) -> dict[str, Any]:
    """Mark a background response cancelled (a finished one is returned as it is)."""
    row = stored_get(response_id, user_id)
    if not row.background:
        raise InvalidRequest("Only background responses can be cancelled.", param="response_id")
    if row.status in ACTIVE:
        body = dict(row.body, status=StoredResponse.Status.CANCELLED)
        StoredResponse.objects.filter(id=row.id, status__in=ACTIVE).update(status=body["status"], body=body)
        row.refresh_from_db()
    return dict(row.body)


def stored_is_active(response_id: str) -> bool:
    """Whether the row still waits for its generation (a cancel from any replica, or a delete, ends that)."""
    return StoredResponse.objects.filter(id=response_id, status__in=ACTIVE).exists()


def stored_delete(response_id: str, user_id: int | None) -> None:
    if not _visible(user_id).filter(id=response_id).delete()[0]:
        raise not_found(response_id)


def history(previous_id: str, user_id: int | None) -> list[dict[str, Any]]:
    """The items of the conversation `previous_id` ends: each turn's input, then its output, oldest first."""
    chain: list[StoredResponse] = []
    next_id = previous_id
    while next_id and len(chain) < MAX_CHAIN:
        row = _visible(user_id).filter(id=next_id).first()
        if row is None and not chain:
            raise NotFound(
                f"Previous response with id '{previous_id}' not found.",
                param="previous_response_id",
                code="not_found",
            )
        if row is None:
            break  # an older turn expired or was deleted: the context starts after it
        if not chain and row.status not in TERMINAL:
            raise InvalidRequest(
                f"Response '{previous_id}' is still {row.status}.", param="previous_response_id"
            )
        chain.append(row)
        next_id = row.previous_response_id
    items: list[dict[str, Any]] = []
    for row in reversed(chain):
        items += list(row.input_items) + list(row.body.get("output") or [])
    return items


def input_item_page(
    response_id: str, user_id: int | None, *, limit: int, order: str, after: str | None
) -> dict[str, Any]:
    """A page of a stored response's input items, as OpenAI's list object."""
    items = list(stored_get(response_id, user_id).input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise InvalidRequest(f"No input item with id '{after}'.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def responses_prune(*, now: dt.datetime | None = None) -> int:
    """Delete expired stored responses, in batches; returns how many went."""
    cutoff = now or timezone.now()
    deleted = 0
    while True:
        ids = list(StoredResponse.objects.filter(expires_at__lte=cutoff).values_list("pk", flat=True)[:BATCH])
        if not ids:
            return deleted
        deleted += StoredResponse.objects.filter(pk__in=ids).delete()[0]


def responses_fail_orphans(*, now: dt.datetime | None = None) -> int:
    """Mark failed the background responses still active past the longest a generation may run: the process
    that ran them stopped (a restart, a crash) before it could finish them. Returns how many."""
    limit = request_timeout_s() + ORPHAN_GRACE_S
    cutoff = (now or timezone.now()) - dt.timedelta(seconds=limit)
    failed = 0
    for row in StoredResponse.objects.filter(status__in=ACTIVE, created_at__lt=cutoff)[:BATCH]:
        message = "The server generating this response stopped before it finished."
        body = dict(
            row.body, status=StoredResponse.Status.FAILED, error=error_object("server_error", message)
        )
        failed += StoredResponse.objects.filter(id=row.id, status__in=ACTIVE).update(
            status=StoredResponse.Status.FAILED, body=body
        )
    return failed
