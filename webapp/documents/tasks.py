"""Celery tasks of documents: reading files is I/O and parsing, fit for the workers."""

from __future__ import annotations

from celery import shared_task

from webapp.documents.indexing import document_extract


@shared_task(name="documents.extract")
def extract_document(document_id: int) -> str:
    return document_extract(document_id=document_id)
