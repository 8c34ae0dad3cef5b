"""Fixtures shared by every suite.

- Settings are `webapp.settings.test`: a throwaway MOONCAKE_DATA per session (removed at the end), the
  converted-model cache under ./var/cache (kept between runs), MOONCAKE_AUTOLOAD off.
- `fake_engine` / `fake_manager`: a scripted engine installed as the process's model manager.
- `daphne_server`: a real Daphne subprocess with the real default model loaded (session-scoped). Override
  the `daphne_server_options` fixture in a conftest nearer your tests to change its settings. Servers of
  their own come from tests/live_server.py, which keeps each start cheap.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

if TYPE_CHECKING:
    from tests.services import Service
    from tests.webapp.fake_engine import FakeEngine, FakeModelManager
    from webapp.serving.runtime import Runtime


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    owned = os.environ.get("MOONCAKE_TEST_OWNS_DATA")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # xdist workers share the controller's data folder; it removes it when they are all done
    if owned and Path(owned).name.startswith("mooncake-test-"):
        shutil.rmtree(owned, ignore_errors=True)


# ---- MOONCAKE_TEST_DATABASE=postgres: the whole session on a throwaway PostgreSQL ------------------------

_POSTGRES_KEY: pytest.StashKey[Service] = pytest.StashKey()
_SHARED_POSTGRES = "MOONCAKE_TEST_POSTGRES_URL"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    choice = os.environ.get("MOONCAKE_TEST_DATABASE", "sqlite")
    if choice == "sqlite" or config.getoption("help") or config.getoption("version", 0):
        return
    if choice != "postgres":
        pytest.exit(f"MOONCAKE_TEST_DATABASE={choice!r}: use sqlite or postgres", returncode=4)
    from tests import services

    shared = os.environ.get(_SHARED_POSTGRES)
    if shared and os.environ.get("PYTEST_XDIST_WORKER"):
        # The controller's server; pytest-django names a test database per worker.
        services.use_database_url(shared)
        return
    reason = services.postgres_skip_reason()
    if reason:
        # Not an error: without root nothing installed PostgreSQL. Never fall back to SQLite silently.
        pytest.exit(f"PostgreSQL pass skipped: {reason}", returncode=0)
    try:
        server = services.start_postgres()
    except services.ServiceError as exc:
        pytest.exit(f"MOONCAKE_TEST_DATABASE=postgres, but PostgreSQL did not start: {exc}", returncode=3)
    config.stash[_POSTGRES_KEY] = server
    services.use_database_url(server.url)
    os.environ[_SHARED_POSTGRES] = server.url  # xdist workers start after this and inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_POSTGRES_KEY, None)
    if server is not None:
        server.stop()


@pytest.fixture(autouse=True)
def runtime() -> Iterator[Runtime]:
    """A fresh runtime per test: its own manager slot, limiter, jobs and services; and the first-run
    answer asked of the database again."""
    from webapp.core import first_run
    from webapp.serving.runtime import Runtime, install_runtime

    first_run.forget()
    fresh = Runtime()
    previous = install_runtime(fresh)
    yield fresh
    fresh.jobs.wait_all(timeout=30)
    fresh.close_services()
    gc.unfreeze()  # a load hook froze the heap: give the next test a collectable one
    install_runtime(previous)


@pytest.fixture
def fake_engine() -> FakeEngine:
    from tests.webapp.fake_engine import FakeEngine

    return FakeEngine()


@pytest.fixture
def fake_manager(fake_engine: FakeEngine, runtime: Runtime) -> Iterator[FakeModelManager]:
    """A manager whose default model is `fake_engine`, installed for the test's duration."""
    from tests.webapp.fake_engine import FakeModelManager

    manager = FakeModelManager.with_engine(fake_engine)
    runtime.install_manager(manager)
    yield manager
    runtime.install_manager(None)


# ---- a throwaway Redis, one per session ------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Service]:
    """One redis-server for the session; skipped (with the reason) where none can run."""
    from tests import services

    reason = services.redis_skip_reason()
    if reason:
        pytest.skip(f"Redis tests skipped: {reason}")
    try:
        server = services.start_redis()
    except services.ServiceError as exc:
        pytest.fail(f"redis-server did not start: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: Service) -> str:
    """The session Redis's URL, its database emptied first so no test sees another's keys."""
    import redis

    with redis.Redis.from_url(redis_server.url) as client:
        client.flushdb()
    return redis_server.url


@pytest.fixture
def redis_channel_layer(redis_url: str, settings: Any) -> Iterator[Any]:
    """CHANNEL_LAYERS on channels_redis for this test: what replicas sharing one chat group use."""
    from channels.layers import channel_layers, get_channel_layer

    # Channels caches layer instances; changing the setting drops them (its setting_changed hook),
    # and the settings fixture's restore drops the Redis one again after the test.
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [redis_url]}}
    }
    channel_layers.backends.clear()
    yield get_channel_layer()
    channel_layers.backends.clear()


# ---- a real server (tests/live_server.py) ------------------------------------------------------------


@pytest.fixture(scope="session")
def daphne_server_options() -> dict[str, Any]:
    """Keyword arguments for start_live_daphne; override this fixture, or set the environment variables."""
    return {
        "api_auth": os.environ.get("MOONCAKE_TEST_SERVER_API_AUTH", "off"),
        "config": None,
        "env": {},
        "startup_timeout": float(os.environ.get("MOONCAKE_TEST_SERVER_TIMEOUT", "600")),
    }


@pytest.fixture(scope="session")
def daphne_server(
    daphne_server_options: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveDaphne]:
    """A real Daphne with the real default model loaded; /health was 200 before this returns."""
    server = start_live_daphne(tmp_path_factory.mktemp("daphne-server"), **daphne_server_options)
    yield server
    stop_live_daphne(server)
