"""Reading an uploaded document once, in a Celery worker: extract its text, chunk it, record the outcome."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from webapp.documents.chunking import chunk_sections
from webapp.documents.extraction import ExtractionError, extract
from webapp.documents.models import Document, DocumentChunk

logger = logging.getLogger(__name__)

UNEXPECTED = "Something went wrong while reading this file; try uploading it again."


def document_extract(*, document_id: int) -> str:
    """Extract and chunk the document once; its row shows the progress and the outcome."""
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return "deleted"
    if document.state in (Document.State.READY, Document.State.FAILED):
        return document.state  # extracted once: a redelivered task does nothing

    def progress(done: int, total: int) -> None:
        Document.objects.filter(pk=document_id).update(
            state=Document.State.EXTRACTING, progress_done=done, progress_total=total
        )

    try:
        sections = extract(
            kind=document.kind, name=document.name, data=bytes(document.data), progress=progress
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
            )
    except ExtractionError as exc:
        mark_failed(document_id, str(exc))
        return "failed"
    except Exception:
        logger.exception("Extracting document %s failed", document_id)
        mark_failed(document_id, UNEXPECTED)
        return "failed"
    return "ready"


def mark_failed(document_id: int, reason: str) -> None:
    Document.objects.filter(pk=document_id).update(state=Document.State.FAILED, error=reason)
