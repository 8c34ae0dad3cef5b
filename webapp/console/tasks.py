"""Celery tasks of the console: I/O only (workers never load models)."""

from __future__ import annotations

from celery import shared_task

from webapp.console.hf_download import hf_import_run


@shared_task(name="console.import_hf_model")
def import_hf_model(job_id: int) -> str:
    return hf_import_run(job_id)
