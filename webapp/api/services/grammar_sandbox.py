"""Grammar validation in child processes with a processor-time and a memory limit.

llguidance bounds most of its compile work with fuel, but not all of it: checking whether the regexes
applied to one value intersect grows about 4x per regex, and a 1 kB schema can ask for gigabytes (which
aborts the whole process rather than raising). So every grammar is validated first in a spawned child
under RLIMIT_AS and a time limit; only a grammar that validated in time is compiled in the server. A child
that runs over is killed and replaced; the request gets a 400.

The limit is the child's processor time, not the wall clock: the child runs below the server's priority,
so on a busy machine a plain grammar can wait seconds for a core, and that says nothing about the grammar.
A wall-clock ceiling (WALL_FACTOR times the limit) still bounds how long a request can wait.
"""

from __future__ import annotations

import json
import os
import queue
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import llguidance

# The processor time a validation may take, and the address space a child may map (Python and llguidance
# take ~100 MB of it before any grammar).
VALIDATE_TIMEOUT_S = 2.0
WALL_FACTOR = 10
START_TIMEOUT_S = 60.0  # an interpreter importing llguidance at low priority on a loaded machine
POLL_S = 0.02
CHILD_MEMORY_BYTES = 1 << 30
WORKERS = 2


# llguidance's bounds on compiling and masking, set explicitly so they are visible here: the library's
# defaults with their costs, except verbose_errors, which would put the parser state and grammar into 400
# messages. Past one, the compile fails cleanly.
LIMITS: dict[str, Any] = {
    "max_items_in_row": 2_000,  # alternatives in one grammar rule (an enum's values)
    "initial_lexer_fuel": 1_000_000,  # building the lexer's regexes: ~20 ms
    "step_lexer_fuel": 200_000,  # one token's mask, lexer part: ~15 ms
    "step_max_items": 50_000,  # one token's mask, parser part: ~2.5 ms
    "max_lexer_states": 250_000,  # ~1-2 kB each
    "max_grammar_size": 500_000,  # symbols in the compiled grammar
    "verbose_errors": False,
}


def parser_limits() -> llguidance.LLParserLimits:
    return llguidance.LLParserLimits(**LIMITS)


class GrammarTooComplex(Exception):
    """The grammar ran past the child's time or memory limit."""

    def __init__(self, message: str, *, cpu_seconds: float | None = None) -> None:
        super().__init__(message)
        self.cpu_seconds = cpu_seconds  # what the child had used when it was stopped, where known


# The child: set its memory limit, then answer one JSON line per grammar with [is_error, message]. It is
# run with `python -c` so that it imports llguidance and nothing of the server (no torch, no Django).
_CHILD = """
import json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import llguidance
limits = llguidance.LLParserLimits(**json.loads(sys.argv[2]))
sys.stdout.write("ready\\n")
sys.stdout.flush()
for line in sys.stdin:
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(json.loads(line), limits=limits)
    sys.stdout.write(json.dumps([bool(is_error), str(messages[0]) if messages else ""]) + "\\n")
    sys.stdout.flush()
"""


# Below the server's priority: a child starting (an interpreter's imports) or validating must not take a
# core from the engine's step, whose threads would then wait on each other and stall every stream.
_NICE = [nice, "-n", "10"] if (nice := shutil.which("nice")) else []


_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float | None:
    """A process's user and system time from /proc (Linux); None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND  # utime, stime


class _Worker:
    def __init__(self, memory_bytes: int) -> None:
        self.process = subprocess.Popen(
            [*_NICE, sys.executable, "-I", "-c", _CHILD, str(memory_bytes), json.dumps(LIMITS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.ready = False

    def _wait_ready(self) -> None:
        """The child's imports are not the grammar's cost: wait for its first line before the clock starts."""
        assert self.process.stdout is not None
        if self.ready:
            return
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT_S)
        if not ready or self.process.stdout.readline() != "ready\n":
            raise GrammarTooComplex("the grammar checker did not start")
        self.ready = True

    def validate(self, grammar: str, timeout: float) -> tuple[bool, str]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self._wait_ready()
        pid = self.process.pid
        baseline, started = _cpu_seconds(pid), time.monotonic()
        try:
            self.process.stdin.write(json.dumps(grammar) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise GrammarTooComplex("the grammar checker stopped") from exc
        while not select.select([self.process.stdout], [], [], POLL_S)[0]:
            now, wall = _cpu_seconds(pid), time.monotonic() - started
            used = now - baseline if now is not None and baseline is not None else wall
            if used > timeout or wall > timeout * WALL_FACTOR:
                raise GrammarTooComplex(f"validating it took more than {timeout:g} s", cpu_seconds=used)
        line = self.process.stdout.readline()
        if not line:  # the child died: out of memory, most likely
            raise GrammarTooComplex("validating it needed more memory than a request may use")
        is_error, message = json.loads(line)
        return bool(is_error), str(message)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class GrammarSandbox:
    """A small pool of validating children (a runtime service); validate() blocks, so call it off the loop."""

    def __init__(
        self,
        *,
        workers: int = WORKERS,
        timeout_s: float = VALIDATE_TIMEOUT_S,
        memory_bytes: int = CHILD_MEMORY_BYTES,
    ) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(workers):
            self._idle.put(None)  # started on first use
        self._lock = threading.Lock()
        self.replaced = 0  # children killed for running over (tests and logs)

    def start(self) -> None:
        """Start the children now (as a model loads), not on the first grammar request mid-stream."""
        workers = []
        while True:
            try:
                workers.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for worker in workers:
            self._idle.put(worker if worker is not None else _Worker(self.memory_bytes))

    def validate(self, grammar: str) -> tuple[bool, str]:
        """(is_error, message) from llguidance; GrammarTooComplex past the time or memory limit."""
        worker = self._idle.get()
        try:
            if worker is None:
                worker = _Worker(self.memory_bytes)
            result = worker.validate(grammar, self.timeout_s)
        except BaseException:
            if worker is not None:
                worker.close()
                with self._lock:
                    self.replaced += 1
            self._idle.put(None)
            raise
        self._idle.put(worker)
        return result

    def close(self) -> None:
        """Stop the idle children (the runtime's stop); one still validating ends with its request."""
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            if worker is not None:
                worker.close()
