"""Jobs (Celery imports and in-process loads/restarts) and the audit log."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.console.audit import audit_record
from webapp.console.hf_import import hf_import_cancel
from webapp.console.models import ConsoleJob
from webapp.console.selectors import any_job_active, audit_list, console_jobs
from webapp.console.views.access import staff_required
from webapp.serving.runtime import get_runtime


def _jobs(request: HttpRequest, *, error: str = "") -> HttpResponse:
    template = "console/_jobs_table.html" if request.htmx else "console/jobs.html"  # type: ignore[attr-defined]
    context = {
        "celery_jobs": console_jobs(),
        "process_jobs": get_runtime().jobs.list(),
        "active": any_job_active(),
        "error": error,
    }
    return render(request, template, context)


@staff_required
@require_GET
def jobs_page(request: HttpRequest) -> HttpResponse:
    return _jobs(request)


@staff_required
@require_POST
def job_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel a hub import: it stops at its next progress write and removes what it fetched."""
    job = get_object_or_404(ConsoleJob, pk=pk)
    error = "" if hf_import_cancel(job=job) else f"Job {job.pk} has already ended ({job.state})."
    if not error:
        audit_record(actor=request.user, action="model.import_cancel", target=job.target)
    if request.htmx:  # type: ignore[attr-defined]
        return _jobs(request, error=error)
    if error:
        messages.error(request, error)
    return redirect("console:jobs")


@staff_required
@require_GET
def audit_page(request: HttpRequest) -> HttpResponse:
    action = request.GET.get("action", "")
    return render(request, "console/audit.html", {"entries": audit_list(action=action), "action": action})
