"""A task sent through the filesystem broker runs in a real worker process, not eagerly in ours."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from webapp.celery import app
from webapp.core.tasks import ping

REPO_ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.worker


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    # Same settings and MOONCAKE_DATA as this process, so both sides use this session's broker folders.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings.test"}
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webapp", "worker", "--pool", "solo", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "--hostname", "test@%h"],
        env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def test_broker_is_the_filesystem_under_the_data_dir() -> None:
    assert app.conf.broker_url == "filesystem://"
    assert app.conf.task_always_eager is False
    queue = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
    assert queue.is_relative_to(settings.DATA_DIR)


def test_ping_runs_in_the_worker_process(worker: subprocess.Popen[bytes], tmp_path: Path) -> None:
    result = ping.delay()
    try:
        value = result.get(timeout=90)
    except Exception:
        pytest.fail("no worker answered:\n" + (tmp_path / "worker.log").read_text(errors="replace")[-3000:])
    assert value["pid"] == worker.pid
    assert value["pid"] != os.getpid()
