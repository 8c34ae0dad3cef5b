"""A real Celery worker process for a live server's data directory (same database and broker folders)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def celery_worker(env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "webapp", "worker", "--pool", "solo", "--loglevel", "INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "--hostname", "documents@%h"],
            env={**env, "DJANGO_SETTINGS_MODULE": "webapp.settings.test"}, cwd=REPO_ROOT,
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
