"""Grammar validation in child processes with a wall-clock and a memory limit.

llguidance bounds most of its compile work with fuel, but not all of it: checking whether the regexes
applied to one value intersect grows about 4x per regex, and a 1 kB schema can ask for gigabytes (which
aborts the whole process rather than raising). So every grammar is validated first in a spawned child
under RLIMIT_AS and a timeout; only a grammar that validated in time is compiled in the server. A child
that runs over is killed and replaced; the request gets a 400.

"""

from __future__ import annotations

import json
import queue
import select
import shutil
import subprocess
import sys
import threading
from typing import Any

import llguidance

# How long a validation may take, and the address space a child may map (Python and llguidance take
# ~100 MB of it before any grammar).
VALIDATE_TIMEOUT_S = 2.0
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


# The child: set its memory limit, then answer one JSON line per grammar with [is_error, message]. It is
# run with `python -c` so that it imports llguidance and nothing of the server (no torch, no Django).
_CHILD = """
import json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import llguidance
limits = llguidance.LLParserLimits(**json.loads(sys.argv[2]))
for line in sys.stdin:
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(json.loads(line), limits=limits)
    sys.stdout.write(json.dumps([bool(is_error), str(messages[0]) if messages else ""]) + "\\n")
    sys.stdout.flush()
"""


# Below the server's priority: a child starting (an interpreter's imports) or validating must not take a
# core from the engine's step, whose threads would then wait on each other and stall every stream.
_NICE = [nice, "-n", "10"] if (nice := shutil.which("nice")) else []


class _Worker:
    def __init__(self, memory_bytes: int) -> None:
        self.process = subprocess.Popen(
            [*_NICE, sys.executable, "-I", "-c", _CHILD, str(memory_bytes), json.dumps(LIMITS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def validate(self, grammar: str, timeout: float) -> tuple[bool, str]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(grammar) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise GrammarTooComplex("the grammar checker stopped") from exc
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise GrammarTooComplex(f"validating it took more than {timeout:g} s")
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
