"""Real servers for the tests: `python -m webapp.serving.server` as a subprocess with its own data directory.

Starting one is kept cheap, as a deployment's replicas are: every server of a run shares one cache folder
(converted models, compiled kernels), a fresh SQLite database is a copy of one migrated once per run, and
rows are made through one long-lived Django shell per server rather than a `manage.py shell` each time.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DB_FILE = "mooncake.sqlite3"  # webapp.settings.base's default database in MOONCAKE_DATA


def shared_cache_dir() -> Path:
    """The run's one cache folder, as webapp.settings.test chose it (./var/cache unless the env says)."""
    path = Path(os.environ.get("MOONCAKE_CACHE_DIR") or REPO_ROOT / "var" / "cache")
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(data_dir: Path, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child with its own data folder (the cache stays shared)."""
    env = {k: v for k, v in os.environ.items() if k != "MOONCAKE_TEST_OWNS_DATA"}
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings.test", MOONCAKE_DATA=str(data_dir), PYTHONUNBUFFERED="1"
    )
    env.update(overrides or {})
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`manage.py ARGS` in a child with `env`; raises with its output when it fails."""
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), *args],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(
            f"manage.py {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done


# ---- one migration per run --------------------------------------------------------------------------------

_template_lock = threading.Lock()
_template: Path | None = None


def migrated_sqlite() -> Path:
    """A SQLite database migrated once per run (in the run's throwaway data folder), to copy from."""
    global _template
    with _template_lock:
        if _template is None:
            folder = Path(os.environ["MOONCAKE_DATA"]) / "migrated-template"
            folder.mkdir(parents=True, exist_ok=True)
            done = folder / "migrated"
            # xdist workers share the run's data folder: the first migrates, the others wait for it.
            with (folder / "lock").open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not done.exists():
                    env = server_env(folder)
                    env.pop("DATABASE_URL", None)
                    manage(env, "migrate", "--noinput")
                    done.touch()
            _template = folder / DB_FILE
        return _template


def prepare_database(env: dict[str, str], data_dir: Path) -> None:
    """A migrated database for a server about to start: a copy of the run's template on SQLite (unless the
    folder has one already: a restart keeps its data), or `migrate` against a DATABASE_URL."""
    if env.get("DATABASE_URL"):
        manage(env, "migrate", "--noinput")
        return
    target = data_dir / DB_FILE
    if target.exists():
        return
    # The backup API, not a file copy: it yields a consistent database whatever journal mode left behind.
    source, copy = sqlite3.connect(migrated_sqlite()), sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()


# ---- one Django shell per server ------------------------------------------------------------------------


class DjangoShell:
    """A Django process kept running beside a server, executing snippets against the server's database.

    Each snippet runs in a fresh namespace; what it prints is returned, and its exception is raised here
    with the child's traceback. Connections are closed after each, so SQLite locks are never held.
    """

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self._lock = threading.Lock()
        self._log = log_path.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.django_shell"],
            env=env, cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            text=True,
        )  # fmt: skip

    def run(self, code: str, timeout: float = 120) -> str:
        with self._lock:
            stdin, stdout = self._pipes()
            stdin.write(json.dumps({"code": code}) + "\n")
            stdin.flush()
            line = _read_line(stdout, timeout)
        if not line:
            raise RuntimeError(f"the Django shell exited with {self._process.poll()}")
        reply = json.loads(line)
        if reply["error"]:
            raise RuntimeError(f"the snippet failed:\n{code}\n{reply['error']}")
        return str(reply["stdout"])

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self._process.stdin is not None and self._process.stdout is not None
        return self._process.stdin, self._process.stdout

    def close(self) -> None:
        if self._process.poll() is None:
            self._pipes()[0].close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._pipes()[1].close()
        self._log.close()


def _read_line(stream: IO[str], timeout: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        raise TimeoutError(f"the Django shell did not answer within {timeout}s")
    return result[0]


def session_snippet(username: str) -> str:
    """Python that makes a logged-in session for `username` in the database and prints its key."""
    return (
        "from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY\n"
        "from django.contrib.auth.models import User\n"
        "from django.contrib.sessions.backends.db import SessionStore\n"
        f"u = User.objects.get(username={username!r})\n"
        "s = SessionStore()\n"
        "s[SESSION_KEY] = str(u.pk)\n"
        "s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend'\n"
        "s[HASH_SESSION_KEY] = u.get_session_auth_hash()\n"
        "s.create()\n"
        "print(s.session_key)\n"
    )


# ---- a real server --------------------------------------------------------------------------------------


@dataclass
class LiveDaphne:
    """A running `python -m webapp.serving.server` with its own data directory and database."""

    host: str
    port: int
    data_dir: Path
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _shell: DjangoShell | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a manage.py command against the server's database (a process of its own)."""
        return manage(self.env, *args, timeout=timeout)

    def shell(self, code: str, timeout: float = 120) -> str:
        """Run Python against the server's database in its long-lived Django shell; returns its output."""
        if self._shell is None:
            self._shell = DjangoShell(self.env, self.data_dir / "shell.log")
        return self._shell.run(code, timeout)

    def create_user(self, username: str, password: str, *, staff: bool = False) -> None:
        self.shell(
            "from django.contrib.auth.models import User\n"
            f"u = User.objects.create_user({username!r}, password={password!r})\n"
            f"u.is_staff = u.is_superuser = {staff!r}\n"
            "u.save()\n"
        )

    def login_session(self, username: str) -> str:
        """A session key for `username`, made in the server's database (a logged-in browser's cookie)."""
        return self.shell(session_snippet(username)).strip()

    def get(self, path: str, timeout: float = 10) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close_shell(self) -> None:
        if self._shell is not None:
            self._shell.close()
            self._shell = None


# A test server's KV cache: one size whatever the CPU (the default follows the model, max_num_seqs and the
# compute dtype, and is zeroed as each engine starts); 512 MiB holds a whole 8k context in float32. A config
# that sets its own size keeps it, and engines that are not ours get none.
TEST_KV_CACHE_BYTES = 512 * 2**20


def with_test_kv_cache(config: dict[str, Any] | None) -> dict[str, Any]:
    merged = dict(config or {})
    engine = dict(merged.get("engine") or {})
    if engine.get("type", "native") == "native":
        engine.setdefault("kv_cache_memory_bytes", TEST_KV_CACHE_BYTES)
    merged["engine"] = engine
    return merged


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
    """Give it a migrated database, start the server, and wait until /health is 200 (/version if no model)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    overrides = {"MOONCAKE_AUTOLOAD": "1" if autoload else "0", "MOONCAKE_API_AUTH": api_auth}
    config_path = data_dir / "mooncake.yaml"
    config_path.write_text(yaml.safe_dump(with_test_kv_cache(config)), encoding="utf-8")
    overrides["MOONCAKE_CONFIG"] = str(config_path)
    environment = server_env(data_dir, overrides | (env or {}))
    server = LiveDaphne("127.0.0.1", free_port(), data_dir, environment, data_dir / "server.log")
    prepare_database(environment, data_dir)
    with server.log_path.open("wb") as log:
        command = [sys.executable, "-m", "webapp.serving.server", "--host", server.host]
        server.process = subprocess.Popen(
            [*command, "--port", str(server.port)],
            env=environment, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
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
        time.sleep(0.2)
    stop_live_daphne(server)
    raise RuntimeError(f"the server was not ready within {startup_timeout}s:\n{server.log_tail()}")


def stop_live_daphne(server: LiveDaphne, timeout: float = 30.0) -> int | None:
    server.close_shell()
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
