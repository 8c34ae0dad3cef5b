"""tests/suites.py, make test's runner: every chosen step runs, a step beside another overlaps it and shows
its output after it, and the exit status says whether any failed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests import suites


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_step_beside_another_runs_during_it_and_reports_after_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "beside-started"
    plan = [
        suites.Step(
            "lint",
            "beside",
            _python(f"open({str(marker)!r}, 'w').close(); print('lint output')"),
            beside="main",
        ),
        # The main step waits for the step beside it to have started: they overlap, or this times out.
        suites.Step(
            "main",
            "foreground",
            _python(
                "import os, sys, time\n"
                f"deadline = time.time() + 60\nwhile not os.path.exists({str(marker)!r}):\n"
                "    time.sleep(0.05)\n    if time.time() > deadline: sys.exit(3)\n"
                "time.sleep(1.2); print('main output')"
            ),
        ),
        suites.Step("last", "after", _python("import sys; sys.exit(1)")),
    ]
    started = time.monotonic()
    assert suites.main([], plan) == 1  # "last" failed
    assert time.monotonic() - started < 60
    out = capfd.readouterr().out
    main_at, lint_at, last_at = out.index("main output"), out.index("lint output"), out.index("==== last")
    assert main_at < lint_at < last_at  # held until the main step ended, shown before the next step
    table = out[out.index("==== wall time per step") :]
    assert [line.split()[0] for line in table.splitlines()[2:5]] == ["main", "lint", "last"]
    assert "FAILED (exit 1)" in table and table.count(" ok ") == 2
    walls = {line.split()[0]: line.split()[1] for line in table.splitlines()[2:5]}
    assert walls["lint"] == "0:00"  # its own time, not the main step's


def test_a_step_chosen_without_its_companion_runs_on_its_own(capfd: pytest.CaptureFixture[str]) -> None:
    plan = [suites.Step("lint", "beside", _python("print('alone')"), beside="main")]
    assert suites.main(["lint"], plan) == 0
    out = capfd.readouterr().out
    assert "==== lint: beside ====" in out and "alone" in out


def test_an_unknown_step_is_refused(capfd: pytest.CaptureFixture[str]) -> None:
    assert suites.main(["nope"], [suites.Step("lint", "x", _python(""))]) == 2
    assert "unknown step(s): nope" in capfd.readouterr().err
