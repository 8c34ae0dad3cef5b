"""The console jobs page says when each job started and finished, in machine-readable <time> elements."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime

import pytest
from django.template.loader import render_to_string

from webapp.console.models import ConsoleJob
from webapp.serving.jobs import ProcessJob, ProcessJobs


def times(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<time class="(job-started|job-finished)" datetime="([^"]+)"', html)


def test_process_jobs_record_start_and_finish() -> None:
    jobs = ProcessJobs()
    release = threading.Event()
    before = time.time()
    job = jobs.start("load", "tiny", lambda: "loaded" if release.wait(10) else "timeout")
    assert job.is_active and job.finished is None
    assert before <= job.started_at <= time.time()
    assert job.started == datetime.fromtimestamp(job.started_at, tz=UTC)
    release.set()
    jobs.wait_all(10)
    assert job.state == "succeeded" and job.finished is not None
    assert job.started <= job.finished and job.finished.tzinfo is not None


@pytest.mark.django_db
def test_jobs_table_shows_times() -> None:
    running = ProcessJob(id=1, kind="load", target="tiny", started_at=1_700_000_000.0)
    done = ProcessJob(
        id=2,
        kind="unload",
        target="tiny",
        state="succeeded",
        started_at=1_700_000_100.0,
        finished_at=1_700_000_105.5,
    )
    imported = ConsoleJob.objects.create(kind="import", target="org/model", state=ConsoleJob.State.SUCCEEDED)
    pending = ConsoleJob.objects.create(kind="import", target="org/other")
    html = render_to_string(
        "console/_jobs_table.html",
        {"process_jobs": [done, running], "celery_jobs": [pending, imported], "active": False},
    )
    found = times(html)
    # Celery: pending (started only), then imported (started and finished); process: done (both), running.
    assert [kind for kind, _ in found] == [
        "job-started", "job-started", "job-finished", "job-started", "job-finished", "job-started"
    ]  # fmt: skip
    stamps = [datetime.fromisoformat(value) for _, value in found]
    assert all(s.tzinfo is not None for s in stamps)
    assert stamps[3] == datetime.fromtimestamp(1_700_000_100, tz=UTC)
    assert stamps[4] == datetime.fromtimestamp(1_700_000_105.5, tz=UTC)
    assert stamps[5] == datetime.fromtimestamp(1_700_000_000, tz=UTC)
    assert stamps[1] == imported.created_at and stamps[2] == imported.updated_at
    assert ">running<" in html  # the running job has no finish time yet
    assert "<th>Started</th><th>Finished</th>" in html
