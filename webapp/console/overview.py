"""The console's landing page: one card per area with its headline figures, each linking to its tab."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from webapp.accounts.models import RequestLog
from webapp.accounts.selectors import pending_accounts
from webapp.console.dashboard import Sampler
from webapp.console.models import AuditLog
from webapp.console.selectors import any_job_active, model_rows
from webapp.serving.runtime import get_runtime

WINDOW = dt.timedelta(hours=24)  # the requests card's span
RECENT_CHANGES = 5


@dataclass(frozen=True, slots=True)
class Overview:
    models_registered: int
    models_loaded: int
    models_failed: int
    default_model: str | None
    requests: int  # in the last WINDOW, chat and API
    client_errors: int  # 4xx: the callers' own (a bad request, a wrong key, a rate limit)
    server_errors: int  # 5xx: ours
    users_active: int
    accounts_pending: int
    jobs_active: bool
    live: dict[str, Any]  # console.dashboard.Sample, this replica's latest
    recent_changes: list[AuditLog] = field(default_factory=list)


def overview() -> Overview:
    rows = model_rows()
    logged = RequestLog.objects.filter(created_at__gte=timezone.now() - WINDOW)
    return Overview(
        models_registered=len(rows),
        models_loaded=sum(row.info.state == "loaded" for row in rows),
        models_failed=sum(row.info.state == "failed" or bool(row.trouble) for row in rows),
        default_model=next((row.info.name for row in rows if row.is_default), None),
        requests=logged.count(),
        client_errors=logged.filter(status_code__gte=400, status_code__lt=500).count(),
        server_errors=logged.filter(status_code__gte=500).count(),
        users_active=User.objects.filter(is_active=True).count(),
        accounts_pending=pending_accounts().count(),
        jobs_active=any_job_active(),
        live=get_runtime().service(Sampler).latest(),
        recent_changes=list(AuditLog.objects.select_related("actor")[:RECENT_CHANGES]),
    )
