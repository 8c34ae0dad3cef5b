"""Celery tasks of documents: reading files is I/O and parsing, fit for the workers.

The worker's signals bracket the reading: when it starts, documents a dead worker left being read are
marked failed; when it begins to stop, every extraction's child is killed, so the warm shutdown waits
moments, not minutes, and those documents are marked failed rather than left being read.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready, worker_shutting_down

from webapp.documents.indexing import STOPPING, WAITING, document_extract, recover_interrupted
from webapp.documents.isolation import stop_all

logger = logging.getLogger(__name__)

# Seconds before a waiting document asks again: soon at first, then no more often than this.
_WAIT_MAX_S = 3.0


@shared_task(name="documents.extract")
def extract_document(document_id: int, attempt: int = 0) -> str:
    outcome = document_extract(document_id=document_id)
    if outcome == WAITING:
        # The owner's other documents are being read: this thread goes to someone else's in the meantime.
        countdown = min(_WAIT_MAX_S, 0.5 * (attempt + 1))
        extract_document.apply_async((document_id,), {"attempt": attempt + 1}, countdown=countdown)
    elif outcome == STOPPING:
        # Taken from the queue as the worker stops: back into it (this worker consumes no more), for the
        # next worker to read.
        extract_document.apply_async((document_id,), {"attempt": attempt})
    return outcome


@shared_task(name="documents.recover")
def recover_documents() -> int:
    return recover_interrupted()


@worker_ready.connect
def _recover_on_start(**_: Any) -> None:
    try:
        recover_interrupted()
    except Exception:  # the database may be coming up too: the periodic task tries again
        logger.exception("Recovering documents left being read failed")


@worker_shutting_down.connect
def _stop_extractions(**_: Any) -> None:
    stop_all()
