"""Import a model from the Hugging Face Hub: the console's request, checked and queued as a Celery job
(the download itself: webapp.console.hf_download)."""

from __future__ import annotations

import re

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.utils import timezone

from webapp.console.hf_download import ACTIVE, KIND, fail, model_name_for
from webapp.console.models import ConsoleJob
from webapp.console.tasks import import_hf_model
from webapp.core.models import ModelRegistration

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


class HubImportError(ValueError):
    """A repo id we refuse before contacting the hub."""


def validate_repo_id(repo_id: str) -> str:
    repo_id = repo_id.strip()
    if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        raise HubImportError("Enter a Hugging Face repo id such as HuggingFaceTB/SmolLM2-135M-Instruct.")
    return repo_id


def hf_import_start(*, actor: AbstractBaseUser | AnonymousUser, repo_id: str) -> ConsoleJob:
    """Queue the import; the job row shows its progress (a worker must be running to pick it up)."""
    repo_id = validate_repo_id(repo_id)
    if ModelRegistration.objects.filter(name=model_name_for(repo_id)).exists():
        raise HubImportError(f"a model named {model_name_for(repo_id)!r} is already registered")
    user = actor if isinstance(actor, User) else None
    job = ConsoleJob.objects.create(kind=KIND, target=repo_id, created_by=user, message="queued")
    try:
        result = import_hf_model.delay(job.pk)
    except Exception as exc:
        fail(job, f"Could not queue the import (is the Celery broker up?): {exc}")
        return job
    ConsoleJob.objects.filter(pk=job.pk).update(celery_id=str(result.id))
    job.refresh_from_db()
    return job


def hf_import_cancel(*, job: ConsoleJob) -> bool:
    """Cancel an import: a queued one never starts, a running one stops at its next progress write and
    removes the files it fetched (webapp.console.hf_download). False when it had already ended."""
    cancelled = ConsoleJob.objects.filter(pk=job.pk, kind=KIND, state__in=ACTIVE).update(
        state=ConsoleJob.State.CANCELLED, message="cancelled", updated_at=timezone.now()
    )
    job.refresh_from_db()
    return bool(cancelled)
