"""Jobs (Celery imports and in-process loads/restarts) and the audit log."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console.selectors import any_job_active, audit_list, console_jobs
from webapp.console.views.access import staff_required
from webapp.serving.runtime import get_runtime


@staff_required
@require_GET
def jobs_page(request: HttpRequest) -> HttpResponse:
    template = "console/_jobs_table.html" if request.htmx else "console/jobs.html"  # type: ignore[attr-defined]
    context = {
        "celery_jobs": console_jobs(),
        "process_jobs": get_runtime().jobs.list(),
        "active": any_job_active(),
    }
    return render(request, template, context)


@staff_required
@require_GET
def audit_page(request: HttpRequest) -> HttpResponse:
    action = request.GET.get("action", "")
    return render(request, "console/audit.html", {"entries": audit_list(action=action), "action": action})
