"""`make test`'s runner: lint, then each test suite in turn, then a table of every step's wall time.

Every step runs even when an earlier one fails, so one run reports everything; the exit status is 1 if
any step failed. `python -m tests.suites --list` prints the steps; `python -m tests.suites NAME...` runs
only those.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.scheduling import RELIABILITY_DIR

REPO_ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _pytest(*args: str) -> list[str]:
    return [str(BIN / "pytest"), "-p", "no:cacheprovider", *args]


# Tests that start real servers, browsers or workers. They run on xdist workers a file at a time (each
# worker starts its own copy of a session server it needs), except the reliability suite: it measures
# stalls and latency under load, so it runs alone on the machine.
LIVE = "slow or browser or reliability or worker or replicas"


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Run alongside that step, its output shown after it: a single-threaded step (mypy) would leave a
    # core idle for a minute on its own. Only beside a step that measures no latency.
    beside: str | None = None


def steps(workers: int) -> list[Step]:
    # Files in collection order (tests/scheduling.py puts the slowest first), not xdist's count order.
    parallel = ["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"] if workers > 1 else []
    return [
        Step("ruff", "lint", [str(BIN / "ruff"), "check", "."], beside="unit"),
        Step("mypy", "types", [str(BIN / "mypy"), "inference", "webapp", "tools"], beside="unit"),
        # Every link and anchor of docs/ resolves, every page is in the nav (tests/build_docs.py).
        Step("docs", "mkdocs build --strict", [sys.executable, "-m", "tests.build_docs"], beside="unit"),
        Step("unit", f"no server, {workers} workers", _pytest("-m", f"not ({LIVE})", *parallel)),
        Step(
            "live",
            f"real servers, browsers, workers, {workers} workers",
            _pytest("-m", f"({LIVE}) and not reliability", *parallel),
        ),
        Step(
            "reliability",
            "hostile load on live servers, alone",
            _pytest(RELIABILITY_DIR, "-m", "reliability"),
        ),
        Step(
            "postgres",
            f"database-marked tests again on PostgreSQL, {workers} workers",
            # tests/database_marker.py fails any test whose queries can differ by database and that lacks
            # the marker; the workers share one PostgreSQL server, a database each.
            _pytest("tests", "-m", f"(database or postgres) and not ({LIVE})", *parallel),
            {"MOONCAKE_TEST_DATABASE": "postgres"},
        ),
    ]


@dataclass(frozen=True)
class Result:
    step: Step
    code: int
    seconds: float
    busy: float | None  # None where /proc/stat is not there; for a step run beside another, theirs together


class _Beside:
    """A step running alongside another, its output held until it ends (so the two do not interleave)."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 - held until finish() prints and closes it
        self.started, self.ticks = time.monotonic(), _cpu_ticks()
        self.process = subprocess.Popen(
            step.command,
            cwd=REPO_ROOT,
            env=_environment() | step.env,
            stdout=self.output,
            stderr=subprocess.STDOUT,
        )
        self.ended: tuple[float, list[int] | None] | None = None
        self.waiter = threading.Thread(target=self._wait, daemon=True)
        self.waiter.start()

    def _wait(self) -> None:
        self.process.wait()
        self.ended = (time.monotonic(), _cpu_ticks())  # its own end, not the end of the step it ran beside

    def finish(self) -> Result:
        self.waiter.join()
        assert self.ended is not None
        ended, ticks = self.ended
        code, seconds = self.process.returncode, ended - self.started
        result = Result(self.step, code, seconds, _busy_share(self.ticks, ticks))
        print(f"\n==== {self.step.name}: {self.step.what} (ran beside {self.step.beside}) ====", flush=True)
        self.output.seek(0)
        sys.stdout.buffer.write(self.output.read())
        sys.stdout.flush()
        self.output.close()
        return result


def _workers() -> int:
    """xdist workers for the unit suites: one per core (the tests pin torch to one thread each)."""
    configured = os.environ.get("MOONCAKE_TEST_WORKERS")
    return int(configured) if configured else max(1, min(len(os.sched_getaffinity(0)), 4))


def main(argv: list[str], plan: list[Step] | None = None) -> int:
    plan = steps(_workers()) if plan is None else plan
    if argv[:1] == ["--list"]:
        for step in plan:
            print(f"{step.name:12} {' '.join(step.command)}")
        return 0
    unknown = set(argv) - {step.name for step in plan}
    if unknown:
        print(f"unknown step(s): {', '.join(sorted(unknown))}; see --list", file=sys.stderr)
        return 2
    chosen = [step for step in plan if not argv or step.name in argv]
    cpu_before, run_started = _cpu_ticks(), time.monotonic()
    run_names = {step.name for step in chosen}
    alongside = [step for step in chosen if step.beside in run_names]
    results: list[Result] = []
    for step in chosen:
        if step in alongside:
            continue
        companions = [_Beside(other) for other in alongside if other.beside == step.name]
        print(f"\n==== {step.name}: {step.what} ====", flush=True)
        started, ticks = time.monotonic(), _cpu_ticks()
        code = subprocess.run(step.command, cwd=REPO_ROOT, env=_environment() | step.env).returncode
        results.append(Result(step, code, time.monotonic() - started, _busy_share(ticks, _cpu_ticks())))
        results.extend(companion.finish() for companion in companions)
    # "busy": the share of the machine's CPU time spent working during the step; well under 100% means
    # the step waits (on timers, sockets, browsers) and more workers would pay.
    print("\n==== wall time per step ====")
    print(f"{'step':12} {'wall':>8} {'busy':>5}  {'outcome':18} what")
    for result in results:
        outcome = "ok" if result.code == 0 else f"FAILED (exit {result.code})"
        shown = f"{result.busy:.0%}" if result.busy is not None else "?"
        step = result.step
        print(f"{step.name:12} {_clock(result.seconds):>8} {shown:>5}  {outcome:18} {step.what}")
    print(f"{'total':12} {_clock(time.monotonic() - run_started):>8}")
    stolen = _stolen_share(cpu_before, _cpu_ticks())
    if stolen is not None:
        # On a shared virtual machine the same run takes up to twice as long when the host is busy.
        print(f"CPU time taken by the hypervisor (steal) during the run: {stolen:.0%}")
    return 0 if all(result.code == 0 for result in results) else 1


def _environment() -> dict[str, str]:
    # Bytecode caches on (as the Makefile has them): each of the run's many Python processes would compile
    # the project, and pytest rewrite every test module, from source again.
    return {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _cpu_ticks() -> list[int] | None:
    """The machine's CPU time counters from /proc/stat (Linux), or None elsewhere."""
    try:
        with open("/proc/stat") as stat:
            return [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def _stolen_share(before: list[int] | None, after: list[int] | None) -> float | None:
    if before is None or after is None or len(after) < 8:
        return None
    spent = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(spent[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    return spent[7] / total if total else None


def _busy_share(before: list[int] | None, after: list[int] | None) -> float | None:
    if before is None or after is None or len(after) < 8:
        return None
    spent = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(spent[:8])
    return (total - spent[3] - spent[4]) / total if total else None  # all but idle and iowait


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
