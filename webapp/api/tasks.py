"""Celery jobs of the API app: keeping the request log and stored responses bounded."""

from __future__ import annotations

import datetime as dt

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from webapp.accounts.models import RequestLog
from webapp.api.services.responses_store import responses_fail_orphans, responses_prune

BATCH = 5000  # rows per delete: a long history goes in short transactions, never one lock on the table


def request_log_prune(*, keep_days: int, now: dt.datetime | None = None) -> int:
    """Delete request-log rows older than `keep_days`; returns how many went. Their tokens are already in
    the daily usage (accounts.DailyUsage), written as each request finished, so no total changes."""
    cutoff = (now or timezone.now()) - dt.timedelta(days=keep_days)
    deleted = 0
    while True:
        ids = list(RequestLog.objects.filter(created_at__lt=cutoff).values_list("pk", flat=True)[:BATCH])
        if not ids:
            return deleted
        deleted += RequestLog.objects.filter(pk__in=ids).delete()[0]


@shared_task(name="api.prune_request_log")
def prune_request_log() -> int:
    return request_log_prune(keep_days=settings.MOONCAKE_REQUEST_LOG_DAYS)


@shared_task(name="api.prune_responses")
def prune_responses() -> int:
    """Stored responses past MOONCAKE_RESPONSES_DAYS (their expires_at) go; background ones orphaned by a
    stopped server are marked failed."""
    return responses_prune() + responses_fail_orphans()
