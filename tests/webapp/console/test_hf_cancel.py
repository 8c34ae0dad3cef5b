"""A hub import shows the bytes fetched of the whole repo and can be cancelled: the download stops at its next
progress write and its files are removed. The real huggingface_hub client against tests/hub_server.py."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from tests.hub_server import HubServer, start_hub
from webapp.console import hf_download
from webapp.console.hf_download import hf_import_run
from webapp.console.hf_import import hf_import_cancel
from webapp.console.models import AuditLog, ConsoleJob
from webapp.core.models import ModelRegistration

REPO = "org/tiny-model"
WEIGHTS = 12 * 1024 * 1024  # over the client's 10 MiB read: at least two progress reports mid-file


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    folder = tmp_path_factory.mktemp("repo")
    (folder / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    (folder / "model.safetensors").write_bytes(os.urandom(WEIGHTS))
    with start_hub({REPO: folder}) as server:
        yield server


@pytest.fixture
def importing(hub: HubServer, settings: Any, model_root: Path, monkeypatch: Any) -> Path:
    settings.MOONCAKE_HF_ENDPOINT = hub.url
    monkeypatch.setattr(hf_download, "PROGRESS_INTERVAL_S", 0.0)  # every read reports: mid-file is seen
    return model_root / "hf" / "org--tiny-model"


Watcher = Callable[[int, int | None], None]


def run_watching(job: ConsoleJob, watch: Watcher) -> str:
    """Run the worker's import, calling `watch(bytes_done, bytes_total)` after each progress write lands."""

    def spy(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if sql.startswith('UPDATE "console_consolejob"') and "bytes_done" in sql:
            row = ConsoleJob.objects.values_list("bytes_done", "bytes_total").get(pk=job.pk)
            watch(row[0] or 0, row[1])
        return result

    with connection.execute_wrapper(spy):
        return hf_import_run(job.pk)


@pytest.mark.database
def test_import_reports_the_bytes_of_the_whole_import(
    staff_client: Client, importing: Path, manager: Any
) -> None:
    job = ConsoleJob.objects.create(kind="hf_import", target=REPO)
    seen: list[tuple[int, int | None]] = []
    run_watching(job, lambda done, total: seen.append((done, total)))
    job.refresh_from_db()
    assert job.state == ConsoleJob.State.SUCCEEDED, job.message
    whole = sum(p.stat().st_size for p in importing.iterdir() if p.is_file())
    assert whole > WEIGHTS and {total for _, total in seen} == {whole}  # every file, from the listing
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == whole  # only ever forward, to the end
    assert any(0 < d < WEIGHTS for d in done)  # the jobs table sees it move mid-file
    assert job.progress == 1.0 and (importing / "model.safetensors").stat().st_size == WEIGHTS
    assert ModelRegistration.objects.filter(name=REPO).exists()
    ConsoleJob.objects.filter(pk=job.pk).update(bytes_done=WEIGHTS // 2, bytes_total=WEIGHTS)
    page = staff_client.get(reverse("console:jobs")).content.decode()
    assert '<div class="muted job-bytes">6.0 MiB of 12.0 MiB</div>' in page  # as a running import reads


@pytest.mark.database
def test_cancel_mid_download_stops_and_removes_the_files(db: None, importing: Path, manager: Any) -> None:
    job = ConsoleJob.objects.create(kind="hf_import", target=REPO)
    cancelled_at: list[int] = []

    def cancel_mid_file(done: int, total: int | None) -> None:
        if total and total > WEIGHTS and 0 < done < WEIGHTS and not cancelled_at:
            cancelled_at.append(done)
            assert hf_import_cancel(job=ConsoleJob.objects.get(pk=job.pk))  # the admin's Cancel button

    message = run_watching(job, cancel_mid_file)
    job.refresh_from_db()
    assert cancelled_at and message.startswith("cancelled")
    assert job.state == ConsoleJob.State.CANCELLED and job.bytes_done == cancelled_at[0]
    assert not importing.exists()  # partial and finished files alike
    assert not ModelRegistration.objects.exists()


@pytest.mark.database
def test_a_queued_import_cancelled_never_starts(
    staff_client: Client, importing: Path, hub: HubServer
) -> None:
    job = ConsoleJob.objects.create(kind="hf_import", target=REPO)
    page = staff_client.get(reverse("console:jobs")).content.decode()
    assert reverse("console:job-cancel", args=[job.pk]) in page and "job-cancel" in page
    response = staff_client.post(reverse("console:job-cancel", args=[job.pk]), headers={"HX-Request": "true"})
    assert response.status_code == 200 and 'data-state="cancelled"' in response.content.decode()
    assert AuditLog.objects.get(action="model.import_cancel").target == REPO
    before = len(hub.requests)
    assert hf_import_run(job.pk) == "cancelled before it started"
    assert len(hub.requests) == before and not importing.exists()


def test_an_ended_job_is_not_cancelled(staff_client: Client) -> None:
    job = ConsoleJob.objects.create(kind="hf_import", target=REPO, state=ConsoleJob.State.SUCCEEDED)
    response = staff_client.post(reverse("console:job-cancel", args=[job.pk]), headers={"HX-Request": "true"})
    assert "has already ended (succeeded)" in response.content.decode()
    job.refresh_from_db()
    assert job.state == ConsoleJob.State.SUCCEEDED
    assert staff_client.post(reverse("console:job-cancel", args=[job.pk + 100])).status_code == 404
