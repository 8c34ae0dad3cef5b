"""Extraction in a child process that can be killed: a wall-clock bound, a memory bound, and a stop.

A parser cannot be interrupted from another thread, and a Celery worker's warm shutdown waits for every
running task: a file that parses for minutes held a worker thread, the memory it grew, and the server's
stop. Each document is read by a child (webapp.documents.extract_child) under RLIMIT_AS; this side
feeds it the file, relays its progress, kills it at the deadline, and kills every child at once when the
worker begins to stop (stop_all), so each task ends within moments and says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from webapp.documents.extraction import ExtractionError, Limits, Progress, Section

# The child's entry: webapp/__init__ creates the Celery app (a fifth of a second to import, per document),
# so the package is stood in for by an empty one before the child's module is imported from it.
_ENTRY = (
    "import sys, types\n"
    "package = types.ModuleType('webapp')\n"
    "package.__path__ = [sys.argv[1]]\n"
    "sys.modules['webapp'] = package\n"
    "from webapp.documents.extract_child import main\n"
    "sys.exit(main())\n"
)
_PACKAGE = str(Path(__file__).resolve().parents[1])
_MB = 1 << 20
ALIVE_INTERVAL_S = 5.0  # how often `alive` is called while a child runs


class ExtractionStopped(ExtractionError):
    """The worker is stopping: the document was not read to its end."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """What reading one document may take (settings MOONCAKE_DOCUMENTS_EXTRACT_*)."""

    seconds: float
    memory_bytes: int


class _Children:
    """The running children, so that a stop reaches every one of them from the signal's thread."""

    def __init__(self) -> None:
        # Reentrant: with Celery's solo pool the stop's signal handler runs on the thread that reads.
        self._lock = threading.RLock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopped: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def add(self, child: subprocess.Popen[bytes]) -> bool:
        with self._lock:
            if self.stopping:
                return False
            self._running.add(child)
            return True

    def remove(self, child: subprocess.Popen[bytes]) -> bool:
        """Forget the child; True when stop_all killed it."""
        with self._lock:
            self._running.discard(child)
            stopped = child in self._stopped
            self._stopped.discard(child)
            return stopped

    def stop_all(self) -> None:
        with self._lock:
            self.stopping = True
            running = list(self._running)
            self._stopped.update(running)
        for child in running:
            child.kill()


_children = _Children()


def stop_all() -> None:
    """Kill every running extraction and refuse new ones: the worker is stopping (its signal handler)."""
    _children.stop_all()


def stopping() -> bool:
    """Whether stop_all was called: a document not yet begun should wait for the next worker."""
    return _children.stopping


def resume() -> None:
    """Accept extractions again after stop_all (a test's process lives on)."""
    _children.stopping = False


def extract_isolated(
    *,
    kind: str,
    name: str,
    data: bytes,
    limits: Limits,
    bounds: Bounds,
    progress: Progress,
    alive: Callable[[], None] = lambda: None,
) -> list[Section]:
    """extract() in a child within `bounds`; ExtractionError for the file, ExtractionStopped on a stop.
    `alive` is called every ALIVE_INTERVAL_S while the child runs."""
    if _children.stopping:
        raise _stopped(name)
    header = {
        "kind": kind, "name": name, "parent": os.getpid(), "memory_bytes": bounds.memory_bytes,
        "seconds": bounds.seconds, "max_pages": limits.max_pages, "max_chars": limits.max_chars,
        "unpack": asdict(limits.unpack),
    }  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-c", _ENTRY, _PACKAGE],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    outcome: dict[str, Any] | None = None
    if _children.add(child):
        payload = json.dumps(header).encode() + b"\n" + data
        threading.Thread(target=_feed, args=(child.stdin, payload), daemon=True).start()
        try:
            outcome = _follow(child, bounds.seconds, progress, alive)
        finally:
            _end(child)
    else:
        _end(child)
    stopped = _children.remove(child) or _children.stopping
    if outcome:  # an answer stands, even if a stop came after it
        return _result(name, bounds, outcome, child.returncode)
    if stopped:
        raise _stopped(name)
    if outcome is None:
        raise _too_slow(name, bounds)
    return _result(name, bounds, outcome, child.returncode)


def _feed(stdin: IO[bytes] | None, payload: bytes) -> None:
    """Write the header and the file, then close: from a thread, so a child that stalls cannot stall us."""
    assert stdin is not None
    with contextlib.suppress(OSError, ValueError):  # the child died or was killed: its end is handled
        try:
            stdin.write(payload)
        finally:
            stdin.close()


def _follow(
    child: subprocess.Popen[bytes], seconds: float, progress: Progress, alive: Callable[[], None]
) -> dict[str, Any] | None:
    """The child's last message ({} if it died without one), relaying progress; None at the deadline."""
    assert child.stdout is not None
    now = time.monotonic()
    deadline, next_alive = now + seconds, now + ALIVE_INTERVAL_S
    fd = child.stdout.fileno()
    buffer, scanned, last = bytearray(), 0, dict[str, Any]()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            if now >= next_alive:
                alive()
                next_alive = now + ALIVE_INTERVAL_S
            if not selector.select(min(deadline, next_alive) - now):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return last
            buffer += chunk
            while (end := buffer.find(b"\n", scanned)) >= 0:
                message = json.loads(bytes(buffer[:end]))
                del buffer[: end + 1]
                scanned = 0
                if "progress" in message:
                    progress(*message["progress"])
                else:
                    last = message
            scanned = len(buffer)


def _end(child: subprocess.Popen[bytes]) -> None:
    """Kill the child if it still runs, and reap it."""
    child.kill()
    child.wait()
    if child.stdout is not None:
        child.stdout.close()


def _result(name: str, bounds: Bounds, outcome: dict[str, Any], returncode: int) -> list[Section]:
    if "sections" in outcome:
        return [Section(text=text, page=page, heading=heading) for text, page, heading in outcome["sections"]]
    if "error" in outcome:
        raise ExtractionError(str(outcome["error"]))
    if "crash" in outcome:  # a bug of ours or of a parser: logged by the task, not shown
        raise RuntimeError(f"the extraction process failed:\n{outcome['crash']}")
    if returncode == -signal.SIGXCPU:
        raise _too_slow(name, bounds)
    # MemoryError, or a parser's C code that aborted or crashed when an allocation failed.
    raise ExtractionError(
        f"{name} needs more than {bounds.memory_bytes / _MB:g} MB of memory to read, the most a document "
        "may use; it may be damaged, or too large: split it into parts."
    )


def _stopped(name: str) -> ExtractionStopped:
    return ExtractionStopped(f"The server stopped while reading {name}; upload it again.")


def _too_slow(name: str, bounds: Bounds) -> ExtractionError:
    return ExtractionError(
        f"{name} took longer than {bounds.seconds:g} s to read, the most a document may; it may be "
        "damaged, or too large: split it into parts."
    )
