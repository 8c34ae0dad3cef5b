"""Reading an uploaded document once, in a Celery worker: extract its text, chunk it, record the outcome.

The text is extracted in a child process within the MOONCAKE_DOCUMENTS_EXTRACT_* bounds
(webapp.documents.isolation). A user's documents are read at most MOONCAKE_DOCUMENTS_MAX_PROCESSING_PER_USER
at a time, so that one user's files cannot hold every worker thread; the rest wait, queued. While a
document is read its row's updated_at is renewed every few seconds: one that stops being renewed was left
by a worker that died, and recover_interrupted marks it failed.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from webapp.documents.chunking import chunk_sections
from webapp.documents.extraction import ExtractionError, Limits
from webapp.documents.isolation import ALIVE_INTERVAL_S, Bounds, extract_isolated, stopping
from webapp.documents.models import Document, DocumentChunk
from webapp.documents.unpacking import UnpackLimits

logger = logging.getLogger(__name__)

UNEXPECTED = "Something went wrong while reading this file; try uploading it again."
INTERRUPTED = "Reading this file was interrupted (the server stopped); upload it again."
WAITING = "waiting"  # the owner's other documents are being read: the task asks again later
STOPPING = "stopping"  # the worker is stopping: the document stays queued for the next one
# A document being read whose row was not renewed for this long was left by a worker that died.
STALE_AFTER_S = 6 * ALIVE_INTERVAL_S
_MB = 1 << 20


class _Gone(Exception):
    """The document was deleted, or marked failed by recover_interrupted, while it was read."""


def document_extract(*, document_id: int) -> str:
    """Extract and chunk the document once; its row shows the progress and the outcome. Returns the
    outcome: "ready", "failed", "deleted", "gone", WAITING, STOPPING, or the state another task left it
    in."""
    if stopping():
        return STOPPING
    claimed = _claim(document_id)
    if claimed is not None:
        return claimed
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return "deleted"

    def progress(done: int, total: int) -> None:
        _touch(document_id, progress_done=done, progress_total=total)

    try:
        sections = extract_isolated(
            kind=document.kind,
            name=document.name,
            data=bytes(document.data),
            limits=limits_from_settings(),
            bounds=_bounds(),
            progress=progress,
            alive=lambda: _touch(document_id),
        )
        chunks = chunk_sections(sections, size=settings.MOONCAKE_DOCUMENTS_CHUNK_CHARS)
        pages = max((s.page for s in sections if s.page is not None), default=None)
        with transaction.atomic():
            if not Document.objects.select_for_update().filter(pk=document_id).exists():
                return "deleted"
            DocumentChunk.objects.filter(document_id=document_id).delete()
            DocumentChunk.objects.bulk_create(
                DocumentChunk(document_id=document_id, index=i, text=c.text, page=c.page, heading=c.heading)
                for i, c in enumerate(chunks)
            )
            Document.objects.filter(pk=document_id).update(
                state=Document.State.READY,
                error="",
                page_count=pages,
                char_count=sum(len(c.text) for c in chunks),
                updated_at=timezone.now(),
            )
    except _Gone:
        return "gone"
    except ExtractionError as exc:
        mark_failed(document_id, str(exc))
        return "failed"
    except Exception:
        logger.exception("Extracting document %s failed", document_id)
        mark_failed(document_id, UNEXPECTED)
        return "failed"
    return "ready"


def _claim(document_id: int) -> str | None:
    """Mark the document as being read (None), unless it is gone, taken, done, or its owner is at the
    limit of documents read at once (WAITING)."""
    owner_id = Document.objects.filter(pk=document_id).values_list("owner_id", flat=True).first()
    if owner_id is None:
        return "deleted"
    most = settings.MOONCAKE_DOCUMENTS_MAX_PROCESSING_PER_USER
    with transaction.atomic():
        # The owner's row serializes their claims (PostgreSQL; SQLite's transactions are serial anyway).
        list(User.objects.select_for_update().filter(pk=owner_id).values_list("pk", flat=True))
        state = Document.objects.filter(pk=document_id).values_list("state", flat=True).first()
        if state is None:
            return "deleted"
        if state != Document.State.QUEUED:
            return str(state)  # done, or read by another task (a redelivered message)
        now = timezone.now()
        reading = Document.objects.filter(
            owner_id=owner_id,
            state=Document.State.EXTRACTING,
            updated_at__gte=now - dt.timedelta(seconds=STALE_AFTER_S),
        )
        if most > 0 and reading.count() >= most:
            return WAITING
        Document.objects.filter(pk=document_id).update(
            state=Document.State.EXTRACTING, progress_done=0, progress_total=0, updated_at=now
        )
    return None


def _touch(document_id: int, **fields: int) -> None:
    """Renew the row of a document being read (with its progress); _Gone once it is gone."""
    updated = Document.objects.filter(pk=document_id, state=Document.State.EXTRACTING).update(
        updated_at=timezone.now(), **fields
    )
    if not updated:
        raise _Gone


def limits_from_settings() -> Limits:
    return Limits(
        max_pages=settings.MOONCAKE_DOCUMENTS_MAX_PAGES,
        max_chars=settings.MOONCAKE_DOCUMENTS_MAX_CHARS,
        unpack=UnpackLimits(
            max_bytes=max(1, settings.MOONCAKE_DOCUMENTS_MAX_UNPACKED_MB) * _MB,
            max_ratio=max(0, settings.MOONCAKE_DOCUMENTS_MAX_UNPACK_RATIO),
        ),
    )


def _bounds() -> Bounds:
    return Bounds(
        seconds=max(1, settings.MOONCAKE_DOCUMENTS_EXTRACT_SECONDS),
        memory_bytes=max(1, settings.MOONCAKE_DOCUMENTS_EXTRACT_MEMORY_MB) * _MB,
    )


def mark_failed(document_id: int, reason: str) -> None:
    Document.objects.filter(pk=document_id).update(
        state=Document.State.FAILED, error=reason, updated_at=timezone.now()
    )


def recover_interrupted() -> int:
    """Mark failed the documents a dead worker left being read; how many there were."""
    now = timezone.now()
    stale = Document.objects.filter(
        state=Document.State.EXTRACTING, updated_at__lt=now - dt.timedelta(seconds=STALE_AFTER_S)
    )
    count = stale.update(state=Document.State.FAILED, error=INTERRUPTED, updated_at=now)
    if count:
        logger.warning("%s document(s) left being read by a stopped worker were marked failed", count)
    return count
