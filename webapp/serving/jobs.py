"""In-process jobs (load, unload, restart): they act on this process's engines, so Celery cannot run them."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

logger = logging.getLogger(__name__)

KEEP_FINISHED = 50


@dataclass(slots=True)
class ProcessJob:
    id: int
    kind: str
    target: str
    state: str = "running"  # running|succeeded|failed
    message: str = ""
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def is_active(self) -> bool:
        return self.state == "running"

    # Aware datetimes for the jobs page (its <time datetime> and the date filter's local time).
    @property
    def started(self) -> datetime:
        return datetime.fromtimestamp(self.started_at, tz=UTC)

    @property
    def finished(self) -> datetime | None:
        return None if self.finished_at is None else datetime.fromtimestamp(self.finished_at, tz=UTC)


class ProcessJobs:
    """A thread per job; the newest jobs are kept in memory for the jobs page."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._jobs: OrderedDict[int, ProcessJob] = OrderedDict()

    def start(self, kind: str, target: str, work: Callable[[], str]) -> ProcessJob:
        job = ProcessJob(id=next(self._ids), kind=kind, target=target)
        job.thread = threading.Thread(
            target=self._run, args=(job, work), name=f"console-{kind}-{target}", daemon=True
        )
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP_FINISHED and not next(iter(self._jobs.values())).is_active:
                self._jobs.popitem(last=False)
        job.thread.start()
        return job

    def _run(self, job: ProcessJob, work: Callable[[], str]) -> None:
        try:
            job.message = work()
            job.state = "succeeded"
        except Exception as exc:
            logger.exception("Console job %s %s failed", job.kind, job.target)
            job.state, job.message = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.finished_at = time.time()

    def list(self) -> list[ProcessJob]:
        with self._lock:
            return list(reversed(self._jobs.values()))

    def active_for(self, target: str) -> ProcessJob | None:
        return next((j for j in self.list() if j.target == target and j.is_active), None)

    def wait_all(self, timeout: float = 60.0) -> None:
        """Join every running job (tests and shutdown)."""
        deadline = time.monotonic() + timeout
        for job in self.list():
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))
