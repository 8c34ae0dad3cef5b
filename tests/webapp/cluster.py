"""A deployment of several replicas on loopback, as docker/compose.yaml describes it: two real Daphne
replicas of the project (each with its own engine and the real default model), one PostgreSQL, one Redis
(channel layer, limits, model-state announcements, Celery broker and results), a Celery worker, and a real
nginx configured by docker/nginx.conf in front."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.live_server import (
    REPO_ROOT,
    DjangoShell,
    LiveDaphne,
    free_port,
    session_snippet,
    with_test_kv_cache,
)
from tests.services import Service, start_postgres, start_redis
from tests.webapp.nginx import Proxy, start_nginx

PASSWORD = "replica-pass-123"


@dataclass
class Http:
    """A logged-in browser's cookies against one origin, with its CSRF token for POSTs."""

    base: str
    cookies: dict[str, str] = field(default_factory=dict)

    def request(self, method: str, path: str, data: dict[str, str] | None = None) -> tuple[int, bytes]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        body = None
        if data is not None:
            body = urllib.parse.urlencode(data).encode()
            headers |= {
                "Content-Type": "application/x-www-form-urlencoded",
                "X-CSRFToken": self.cookies.get("csrftoken", ""),
                "HX-Request": "true",  # the console answers htmx posts with the table, not a redirect
            }
        request = urllib.request.Request(self.base + path, body, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                self._keep(response.headers.get_all("Set-Cookie") or [])
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()

    def _keep(self, set_cookies: list[str]) -> None:
        for header in set_cookies:
            name, _, rest = header.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]

    def get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)

    def post(self, path: str, data: dict[str, str]) -> tuple[int, bytes]:
        if "csrftoken" not in self.cookies:
            self.get("/console/models/")  # sets the CSRF cookie
        return self.request("POST", path, data)


@dataclass
class Cluster:
    postgres: Service
    redis: Service
    replicas: dict[str, LiveDaphne]
    proxy: Proxy | None
    worker: subprocess.Popen[bytes]
    env: dict[str, str]
    work: Path

    shell: DjangoShell | None = None

    def manage_shell(self, code: str) -> str:
        """Run Python in a Django shell against the shared database; returns what it printed."""
        if self.shell is None:
            self.shell = DjangoShell(self.replicas["a"].env, self.work / "shell.log")
        return self.shell.run(code).strip()

    def login(self, base: str, username: str) -> Http:
        """A session for `username`, made in the shared database (so it is valid on every replica)."""
        key = self.manage_shell(session_snippet(username))
        return Http(base, {"sessionid": key})

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.postgres.url) as conn:
            return list(conn.execute(sql, args).fetchall())

    def start_replica(self, name: str, port: int | None = None, *, wait_model: bool = True) -> LiveDaphne:
        old = self.replicas.get(name)
        data = self.work / f"replica-{name}"
        data.mkdir(exist_ok=True)
        env = self.env | {"MOONCAKE_REPLICA_NAME": name, "MOONCAKE_DATA": str(data)}
        port = port or (old.port if old else free_port())
        server = LiveDaphne("127.0.0.1", port, data, env, data / "server.log")
        with server.log_path.open("ab") as log:
            server.process = subprocess.Popen(
                [sys.executable, "-m", "webapp.serving.server", "--host", server.host, "--port", str(port)],
                env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.replicas[name] = server
        wait_ready(server, "/health" if wait_model else "/version")
        return server

    def stop_replica(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.replicas[name].process
        assert process is not None
        process.send_signal(sig)
        process.wait(timeout=60)

    def stop(self) -> None:
        if self.shell is not None:
            self.shell.close()
        for name in list(self.replicas):
            process = self.replicas[name].process
            if process is not None and process.poll() is None:
                self.stop_replica(name)
        if self.proxy is not None:
            self.proxy.stop()
        self.worker.terminate()
        try:
            self.worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.worker.kill()
        self.redis.stop()
        self.postgres.stop()


def wait_ready(server: LiveDaphne, path: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.process is not None
        if server.process.poll() is not None:
            raise RuntimeError(f"replica exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            status, _ = server.get(path, timeout=5)
        except OSError:
            status = 0
        if status == 200:
            return
        time.sleep(0.3)
    raise RuntimeError(f"replica not ready within {timeout}s:\n{server.log_tail()}")


def start_cluster(work: Path, *, extra_env: dict[str, str] | None = None) -> Cluster:
    postgres = start_postgres()
    redis = start_redis()
    base_redis = redis.url.rsplit("/", 1)[0]
    models = work / "models"
    models.mkdir(parents=True, exist_ok=True)
    inherited = {k: v for k, v in os.environ.items() if k not in ("MOONCAKE_TEST_OWNS_DATA", "MOONCAKE_DATA")}
    # nginx passes Host without its port ($host), so a page on the proxy's port is a trusted origin, as a
    # deployment on a port other than 80/443 declares it (webapp.core.origins, Django's CSRF check).
    proxy_port = free_port()
    env = (
        inherited
        | {
            "DJANGO_SETTINGS_MODULE": "webapp.settings.test",
            "DATABASE_URL": postgres.url,
            "REDIS_URL": f"{base_redis}/0",
            "CELERY_BROKER_URL": f"{base_redis}/1",
            "CELERY_RESULT_BACKEND": f"{base_redis}/2",
            "MOONCAKE_TEST_SHARED_LAYER": "1",
            "MOONCAKE_AUTOLOAD": "1",
            "MOONCAKE_API_AUTH": "required",
            "MOONCAKE_MODEL_ROOTS": str(models),
            "MOONCAKE_CHAT_REPLY_LEASE_SECONDS": "6",
            "CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{proxy_port}",
            "MOONCAKE_CPU_THREADS": "1",  # two replicas share this machine's cores
            "PYTHONUNBUFFERED": "1",
        }
        | (extra_env or {})
    )
    if "MOONCAKE_CONFIG" not in env:
        config = work / "mooncake.yaml"
        config.write_text(yaml.safe_dump(with_test_kv_cache(None)), encoding="utf-8")
        env["MOONCAKE_CONFIG"] = str(config)
    env["MOONCAKE_DATA"] = str(work / "worker")
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), "migrate", "--noinput"],
        env=env, cwd=REPO_ROOT, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    worker_log = (work / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webapp", "worker", "--pool", "threads", "--concurrency", "2",
         "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--hostname", "replicas-test@%h"],
        env=env | {"MOONCAKE_AUTOLOAD": "0"}, cwd=REPO_ROOT, stdout=worker_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    cluster = Cluster(postgres, redis, {}, None, worker, env, work)
    ports = {"a": free_port(), "b": free_port()}
    try:
        for name, port in ports.items():  # both load their model at once
            cluster.start_replica(name, port, wait_model=False)
        for server in cluster.replicas.values():
            wait_ready(server, "/health")
        (work / "nginx").mkdir()
        cluster.proxy = start_nginx(
            [f"127.0.0.1:{p}" for p in ports.values()], work / "nginx", port=proxy_port
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def read_json(body: bytes) -> Any:
    return json.loads(body.decode())
