"""Throwaway PostgreSQL and Redis servers for the tests: loopback ports, a temp data directory, stopped after.

`make test` installs Debian's postgresql and redis-server when it runs as root; elsewhere the suites that
need them are skipped with the reason `postgres_skip_reason()` / `redis_skip_reason()` give.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

# The account Debian's package creates; postgres refuses to run as root, so root runs it as this user.
POSTGRES_USER = "postgres"
DB_NAME = "mooncake"
DB_ROLE = "mooncake"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ServiceError(RuntimeError):
    """A service could not be started."""


@dataclass
class Service:
    """A running server: its URL, its process and the directory removed when it stops."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    log_path: Path
    stop_signal: int = signal.SIGTERM

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def find_binary(name: str) -> str | None:
    """`name` on PATH, else in Debian's versioned PostgreSQL folder (the newest version wins)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")

    def version(path: str) -> tuple[int, ...]:
        part = Path(path).parent.parent.name
        return tuple(int(p) for p in part.split(".") if p.isdigit())

    return max(candidates, key=version) if candidates else None


def _postgres_bin(name: str) -> str | None:
    # initdb and postgres must come from the same version: take both from postgres's own folder.
    server = find_binary("postgres")
    if server is None:
        return None
    sibling = Path(os.path.realpath(server)).parent / name
    return str(sibling) if sibling.exists() else find_binary(name)


def _is_root() -> bool:
    return os.geteuid() == 0


def postgres_skip_reason() -> str | None:
    """Why a throwaway PostgreSQL cannot run here, or None when it can."""
    if _postgres_bin("postgres") is None or _postgres_bin("initdb") is None:
        how = "make test installs it as root" if _is_root() else "make test installs it only when run as root"
        return f"PostgreSQL is not installed (apt-get install postgresql; {how})"
    if _is_root():
        try:
            pwd.getpwnam(POSTGRES_USER)
        except KeyError:
            return f"running as root, but there is no {POSTGRES_USER!r} user to run PostgreSQL as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev,prod]'; make install does)"
    return None


def redis_skip_reason() -> str | None:
    """Why a throwaway Redis cannot run here, or None when it can."""
    if find_binary("redis-server") is None:
        how = "make test installs it as root" if _is_root() else "make test installs it only when run as root"
        return f"redis-server is not installed (apt-get install redis-server; {how})"
    try:
        import channels_redis  # noqa: F401
        import redis  # noqa: F401
    except ImportError:
        return "redis / channels-redis are not installed (pip install -e '.[dev,prod]'; make install does)"
    return None


def skip_reason() -> str | None:
    """Why the services cannot all run here, or None."""
    return postgres_skip_reason() or redis_skip_reason()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: have the kernel stop it when the test process dies, even by SIGKILL or a timeout."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGINT)  # fast shutdown for postgres, plain exit for Redis


def _run_as_postgres() -> dict[str, object]:
    """Popen arguments that drop root to the postgres user (nothing when not root)."""
    if not _is_root():
        return {}
    account = pwd.getpwnam(POSTGRES_USER)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def start_postgres(timeout: float = 60.0) -> Service:
    """initdb a fresh cluster, start it on 127.0.0.1, and create a password-protected role and database."""
    reason = postgres_skip_reason()
    if reason:
        raise ServiceError(reason)
    initdb, postgres = _postgres_bin("initdb"), _postgres_bin("postgres")
    assert initdb and postgres
    workdir = Path(tempfile.mkdtemp(prefix="mooncake-pg-"))
    drop = _run_as_postgres()
    if drop:
        os.chown(workdir, int(drop["user"]), int(drop["group"]))  # type: ignore[call-overload]
    data, log_path = workdir / "data", workdir / "postgres.log"
    # Local socket connections are trusted (only this run uses them); TCP needs the role's password.
    init = subprocess.run(
        [initdb, "-D", str(data), "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
         "--no-locale", "-E", "UTF8", "--no-sync"],
        capture_output=True, text=True, cwd=workdir, **drop,  # type: ignore[call-overload]
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise ServiceError(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
    port = free_port()
    # Durability is worthless for a database thrown away after the run; skipping it makes tests faster.
    args = [postgres, "-D", str(data), "-p", str(port), "-k", str(workdir),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off", "-c", "max_connections=200"]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # type: ignore[call-overload]
            args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
            preexec_fn=_die_with_parent, **drop,
        )  # fmt: skip
    password = secrets.token_hex(16)
    # SIGINT is PostgreSQL's fast shutdown: it ends open sessions instead of waiting for them.
    service = Service("PostgreSQL", "", process, workdir, log_path, stop_signal=signal.SIGINT)
    try:
        admin = _wait_for_postgres(service, str(workdir), port, timeout)
        with admin:
            # CREATEDB: pytest-django creates (and drops) its own test_ database next to this one.
            admin.execute(f"CREATE ROLE {DB_ROLE} LOGIN CREATEDB PASSWORD '{password}'")
            admin.execute(f"CREATE DATABASE {DB_NAME} OWNER {DB_ROLE}")
    except BaseException:
        service.stop()
        raise
    service.url = f"postgres://{DB_ROLE}:{password}@127.0.0.1:{port}/{DB_NAME}"
    return service


def _wait_for_postgres(service: Service, socket_dir: str, port: int, timeout: float) -> psycopg.Connection:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if service.process.poll() is not None:
            raise ServiceError(f"postgres exited with {service.process.returncode}:\n{service.log_tail()}")
        try:
            return psycopg.connect(
                host=socket_dir, port=port, user="postgres", dbname="postgres", autocommit=True,
                connect_timeout=2,
            )  # fmt: skip
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                tail = service.log_tail()
                raise ServiceError(f"postgres did not answer within {timeout}s:\n{tail}") from exc
        time.sleep(0.1)


def start_redis(timeout: float = 20.0) -> Service:
    """redis-server on 127.0.0.1 with persistence off; the URL names database 0."""
    reason = redis_skip_reason()
    if reason:
        raise ServiceError(reason)
    server = find_binary("redis-server")
    assert server
    workdir = Path(tempfile.mkdtemp(prefix="mooncake-redis-"))
    log_path, port = workdir / "redis.log", free_port()
    args = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(workdir), "--logfile", str(log_path)]  # fmt: skip
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        preexec_fn=_die_with_parent,
    )  # fmt: skip
    service = Service("Redis", f"redis://127.0.0.1:{port}/0", process, workdir, log_path)
    deadline = time.monotonic() + timeout
    while not _redis_pong(port):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = service.log_tail()
            service.stop()
            raise ServiceError(f"redis-server did not answer on port {port} within {timeout}s:\n{tail}")
        time.sleep(0.05)
    return service


def _redis_pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def use_database_url(url: str) -> None:
    """Point this process's Django at `url`.

    pytest-django reads the settings before any conftest loads, so they are patched here, before any
    connection opens. DATABASE_URL stays unset: servers and CLIs the tests start keep their own SQLite
    file in their own data directory, as their tests expect.
    """
    from django.conf import settings
    from django.db import connections

    from webapp.settings.database import database_from_url

    database = database_from_url(url, default_sqlite=Path("unused"))
    # Connections kept open by worker threads would stop pytest-django from dropping its test database.
    database["CONN_MAX_AGE"] = 0
    settings.DATABASES["default"] = database
    # Importing the apps already built a (still unopened) SQLite wrapper: drop it and the cached settings.
    if "default" in connections:
        connections["default"].close()
        del connections["default"]
    connections._settings = None  # type: ignore[attr-defined]
    connections.__dict__.pop("settings", None)
