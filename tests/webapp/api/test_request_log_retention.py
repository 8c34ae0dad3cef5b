"""The request log keeps a bounded history: rows older than MOONCAKE_REQUEST_LOG_DAYS go, in batches,
while the daily usage they were counted into stays whole."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from webapp.accounts.models import DailyUsage, RequestLog
from webapp.accounts.request_log import RequestRecord, request_record_save
from webapp.api import tasks
from webapp.celery import app

pytestmark = pytest.mark.django_db


def _request(user: User, tokens: int, age_days: float) -> None:
    record = RequestRecord(endpoint="chat.completions", model="m", prompt_tokens=tokens, completion_tokens=1)
    async_to_sync(request_record_save)(record=record, user_id=user.pk)
    row = RequestLog.objects.latest("pk")
    RequestLog.objects.filter(pk=row.pk).update(created_at=timezone.now() - dt.timedelta(days=age_days))


def _tokens(user: User) -> int:
    return sum(row.total_tokens for row in DailyUsage.objects.filter(user=user))


@pytest.mark.database
def test_old_rows_go_in_batches_and_the_daily_totals_stay(monkeypatch: Any) -> None:
    user = User.objects.create_user("counted")
    for age in (40, 35, 31, 5, 0.1):
        _request(user, tokens=10, age_days=age)
    before = _tokens(user)
    monkeypatch.setattr(tasks, "BATCH", 2)  # three old rows: two batches and an empty read
    assert tasks.request_log_prune(keep_days=30) == 3
    ages = sorted((timezone.now() - r.created_at).days for r in RequestLog.objects.all())
    assert ages == [0, 5]
    assert _tokens(user) == before == 5 * 11
    assert tasks.request_log_prune(keep_days=30) == 0


@pytest.mark.database
def test_the_periodic_job_uses_the_setting_and_is_scheduled(settings: Any) -> None:
    user = User.objects.create_user("scheduled")
    _request(user, tokens=1, age_days=3)
    settings.MOONCAKE_REQUEST_LOG_DAYS = 7
    assert tasks.prune_request_log() == 0
    settings.MOONCAKE_REQUEST_LOG_DAYS = 2
    assert tasks.prune_request_log() == 1
    schedule = settings.CELERY_BEAT_SCHEDULE["prune-request-log"]
    app.loader.import_default_modules()
    assert schedule["task"] in app.tasks


def test_serve_starts_its_worker_with_beat() -> None:
    from webapp.processes import worker_command

    command = worker_command()
    assert command[command.index("-A") + 1 : command.index("-A") + 3] == ["webapp", "worker"]
    assert "--beat" in command
    assert settings.CELERY_BEAT_SCHEDULE_FILENAME.startswith(str(settings.DATA_DIR))
