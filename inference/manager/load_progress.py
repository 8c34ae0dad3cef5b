"""Load progress for ModelManager: what a loading model's engine reports (inference.progress) lands on its
ModelInfo, so that the console shows "converting tensors 120/272" rather than a bare "loading"; and a hub
model's download, which the engine factory reports (report_download).

A mixin, not a separate object: it changes the manager's entries under the manager's one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from inference.config import EngineConfig
from inference.progress import STARTING, LoadProgress, report, reporting


class LoadReporting:
    # Provided by ModelManager.
    _lock: threading.RLock
    _entries: dict[str, Any]

    def report_download(self, config: EngineConfig, done: int, total: int | None) -> None:
        """The engine factory fetching files for `config` (the very object the manager passed it) reports
        progress: the model reads "downloading" with the bytes so far; done == total means fetched (it reads
        "loading" again while the engine starts)."""
        with self._lock:
            for entry in self._entries.values():
                if entry.config is config and entry.info.state in ("loading", "downloading"):
                    finished = total is not None and done >= total
                    entry.info.state = "loading" if finished else "downloading"
                    entry.info.download_bytes_done, entry.info.download_bytes_total = done, total

    @contextmanager
    def reporting_load(self, entry: Any) -> Iterator[None]:
        """Around an engine factory's call for `entry`: its reports become the entry's load fields."""
        with reporting(lambda progress: self._record_load(entry, progress)):
            report(STARTING)  # engines that report nothing of their own (remote, supervised) read this
            yield

    def _record_load(self, entry: Any, progress: LoadProgress) -> None:
        with self._lock:
            # Only while loading: a report that arrives after the load ended (or while a hub download owns
            # the fields that say how far it is) describes nothing the console should show.
            if entry.info.state != "loading":
                return
            info = entry.info
            info.load_phase, info.load_done, info.load_total = progress.phase, progress.done, progress.total
