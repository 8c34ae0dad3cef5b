"""The `database` marker's check: a test that runs SQL from code whose behaviour can differ by database must
carry `@pytest.mark.database` (or `postgres`, for tests that mean something only there), because only
marked tests run again in the PostgreSQL pass.

Which code: every webapp function that locks rows, opens a transaction, aggregates, updates with F(),
creates concurrently (get_or_create, bulk_create, IntegrityError), runs raw SQL or full-text search, orders
(collation and NULL order differ) or matches text case-insensitively or by prefix, and Django's migration
executor. The list is derived from the source (`database_dependent_code`), so new code joins it by what it
does. The check is at runtime: each query the test process runs, in any thread, is charged to the listed
functions on its call stack, and a test that ran such a query without the marker fails at teardown naming
them.
"""

from __future__ import annotations

import ast
import re
import sys
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# What makes a function's queries or their outcome depend on the database vendor.
DATABASE_CONSTRUCTS = re.compile(
    r"select_for_update|transaction\.|atomic|\.aggregate\(|\.annotate\(|\bF\(|get_or_create|update_or_create"
    r"|bulk_create|bulk_update|IntegrityError|connection\.cursor|connections\[|\.raw\(|\.extra\("
    r"|Search(?:Vector|Query|Rank)|Window\(|Subquery\(|OuterRef|Coalesce\(|\.vendor|\.distinct\("
    r"|\.order_by\(|__i?(?:contains|startswith|endswith|exact|regex)\b|\bExtract(?:Year|Month|Day|Hour)?\("
    r"|\bTrunc\w*\(|\bLower\(|\bUpper\("
)
# pytest-django migrates each test database once per session; that is set-up, not the test's behaviour.
SETUP_MODULES = ("pytest_django.",)


@dataclass(frozen=True)
class Span:
    """A function's lines, decorators included, and its dotted name."""

    first: int
    last: int
    name: str


def _spans(path: Path, module: str) -> list[Span]:
    spans = []
    source = path.read_text()
    tree, lines = ast.parse(source), source.splitlines()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    last = child.end_lineno or child.lineno
                    if DATABASE_CONSTRUCTS.search("\n".join(lines[first - 1 : last])):
                        spans.append(Span(first, last, f"{module}.{name}"))
                visit(child, f"{name}.")

    visit(tree, "")
    return spans


@cache
def database_dependent_code() -> dict[str, list[Span]]:
    """File name -> the spans of its functions whose behaviour can differ by database."""
    import django.db.migrations.executor as executor

    found: dict[str, list[Span]] = {}
    for path in sorted((REPO_ROOT / "webapp").rglob("*.py")):
        relative = path.relative_to(REPO_ROOT)
        if "migrations" in relative.parts:
            continue  # run by the migrator, which is listed whole
        spans = _spans(path, ".".join(relative.with_suffix("").parts))
        if spans:
            found[str(path)] = spans
    migrator = Path(executor.__file__)
    found[str(migrator)] = [Span(1, sys.maxsize, executor.__name__)]
    return found


class QueryWatch:
    """Collects the database-dependent functions on the stack of every query while a test runs."""

    def __init__(self, watched: dict[str, list[Span]]) -> None:
        self.watched = watched
        self.touched: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        functions = self.functions_on_stack(sys._getframe(1))
        if functions:
            with self._lock:
                self.touched |= functions
        return execute(sql, params, many, context)

    def functions_on_stack(self, frame: Any) -> set[str]:
        found: set[str] = set()
        while frame is not None:
            if frame.f_globals.get("__name__", "").startswith(SETUP_MODULES):
                return set()
            spans = self.watched.get(frame.f_code.co_filename)
            if spans:
                line = frame.f_lineno
                found.update(span.name for span in spans if span.first <= line <= span.last)
            frame = frame.f_back
        return found

    def take(self) -> set[str]:
        with self._lock:
            touched, self.touched = self.touched, set()
        return touched


_WATCH_KEY: pytest.StashKey[QueryWatch] = pytest.StashKey()


def _install(watch: QueryWatch) -> None:
    from django.db import connections
    from django.db.backends.signals import connection_created

    def wrap(connection: Any, **_: Any) -> None:
        if watch not in connection.execute_wrappers:
            connection.execute_wrappers.append(watch)

    # Each thread opens its own connections; the signal reaches every one of them.
    connection_created.connect(wrap, weak=False, dispatch_uid="tests.database_marker")
    for connection in connections.all(initialized_only=True):
        wrap(connection)


def pytest_sessionstart(session: pytest.Session) -> None:
    watch = QueryWatch(database_dependent_code())
    session.config.stash[_WATCH_KEY] = watch
    _install(watch)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    watch = item.config.stash.get(_WATCH_KEY, None)
    if watch is not None:
        watch.take()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    watch = item.config.stash.get(_WATCH_KEY, None)
    if watch is None or call.when != "teardown":
        return report
    touched = watch.take()
    marked = item.get_closest_marker("database") or item.get_closest_marker("postgres")
    if touched and not marked and report.outcome == "passed":
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} ran queries from {', '.join(sorted(touched))}, whose behaviour can differ by "
            "database: mark it @pytest.mark.database so the PostgreSQL pass runs it too"
        )
    return report
