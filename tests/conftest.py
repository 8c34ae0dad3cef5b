"""Fixtures shared by every suite.

- Settings are `webapp.settings.test`: a throwaway MOONCAKE_DATA per session (removed at the end), the
  converted-model cache under ./var/cache (kept between runs), MOONCAKE_AUTOLOAD off.
- `fake_engine` / `fake_manager`: a scripted engine installed as the process's model manager.
- `daphne_server`: a real Daphne subprocess with the real default model loaded (session-scoped). Override
  the `daphne_server_options` fixture in a conftest nearer your tests to change its settings.
"""

from __future__ import annotations

import gc
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tests.services import Service
    from tests.webapp.fake_engine import FakeEngine, FakeModelManager
    from webapp.core.runtime import Runtime

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    owned = os.environ.get("MOONCAKE_TEST_OWNS_DATA")
    if owned and Path(owned).name.startswith("mooncake-test-"):
        shutil.rmtree(owned, ignore_errors=True)


# ---- MOONCAKE_TEST_DATABASE=postgres: the whole session on a throwaway PostgreSQL ------------------------

_POSTGRES_KEY: pytest.StashKey[Service] = pytest.StashKey()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    choice = os.environ.get("MOONCAKE_TEST_DATABASE", "sqlite")
    if choice == "sqlite" or config.getoption("help") or config.getoption("version", 0):
        return
    if choice != "postgres":
        pytest.exit(f"MOONCAKE_TEST_DATABASE={choice!r}: use sqlite or postgres", returncode=4)
    from tests import services

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


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_POSTGRES_KEY, None)
    if server is not None:
        server.stop()


@pytest.fixture(autouse=True)
def runtime() -> Iterator[Runtime]:
    """A fresh runtime per test: its own manager slot, limiter, jobs, services and first-run cache."""
    from webapp.core.runtime import Runtime, install_runtime

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


# ---- a real server --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveDaphne:
    """A running `python -m webapp.core.server` with its own data directory and database."""

    host: str
    port: int
    data_dir: Path
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a manage.py command against the server's database."""
        return subprocess.run(
            [sys.executable, str(REPO_ROOT / "manage.py"), *args],
            env=self.env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=True,
        )  # fmt: skip

    def create_user(self, username: str, password: str, *, staff: bool = False) -> None:
        code = (
            "from django.contrib.auth.models import User\n"
            f"u = User.objects.create_user({username!r}, password={password!r})\n"
            f"u.is_staff = u.is_superuser = {staff!r}\n"
            "u.save()\n"
        )
        self.manage("shell", "-c", code)

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def start_live_daphne(
    data_dir: Path,
    *,
    api_auth: str = "off",
    config: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    autoload: bool = True,
    startup_timeout: float = 600.0,
    wait_ready: bool = True,
) -> LiveDaphne:
    """Migrate a fresh database, start the server, and wait until /health is 200 (or /version if no model)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    server_env = {k: v for k, v in os.environ.items() if k != "MOONCAKE_TEST_OWNS_DATA"}
    server_env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings.test",
        MOONCAKE_DATA=str(data_dir),
        MOONCAKE_AUTOLOAD="1" if autoload else "0",
        MOONCAKE_API_AUTH=api_auth,
        PYTHONUNBUFFERED="1",
    )
    if config:
        config_path = data_dir / "mooncake.yaml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        server_env["MOONCAKE_CONFIG"] = str(config_path)
    server_env.update(env or {})
    server = LiveDaphne("127.0.0.1", free_port(), data_dir, server_env, data_dir / "server.log")
    server.manage("migrate", "--noinput")
    with server.log_path.open("wb") as log:
        server.process = subprocess.Popen(
            [sys.executable, "-m", "webapp.core.server", "--host", server.host, "--port", str(server.port)],
            env=server_env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    ready_path = "/health" if autoload and wait_ready else "/version"
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            status, body = server.get(ready_path, timeout=5)
        except OSError:
            status, body = 0, b""
        if status == 200:
            return server
        if b'"failed"' in body:
            stop_live_daphne(server)
            raise RuntimeError(f"the default model failed to load: {body!r}\n{server.log_tail()}")
        time.sleep(0.5)
    stop_live_daphne(server)
    raise RuntimeError(f"the server was not ready within {startup_timeout}s:\n{server.log_tail()}")


def stop_live_daphne(server: LiveDaphne, timeout: float = 30.0) -> int | None:
    if server.process is None:
        return None
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    return server.process.returncode


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
