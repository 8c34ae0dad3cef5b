"""docker/nginx.conf in a real nginx on a loopback port, with the compose file's names swapped for a test's
addresses (its upstream replicas, its static folder)."""

from __future__ import annotations

import http.client
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.live_server import REPO_ROOT, free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def nginx_skip_reason() -> str | None:
    if not Path(NGINX).exists():
        return "nginx is not installed (make test installs it with apt-get when run as root)"
    return None


@dataclass
class Proxy:
    port: int
    access_log: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def site_config(upstreams: list[str], static_dir: Path, port: int) -> str:
    """The shipped site with the compose file's names swapped for these addresses."""
    text = (REPO_ROOT / "docker" / "nginx.conf").read_text(encoding="utf-8")
    assert "server web:8000;" in text and "alias /srv/static/;" in text and "listen 80;" in text
    servers = "\n    ".join(f"server {upstream};" for upstream in upstreams)
    return (
        text.replace("server web:8000;", servers)
        .replace("alias /srv/static/;", f"alias {static_dir}/;")
        .replace("listen 80;", f"listen 127.0.0.1:{port};")
    )


def start_nginx(upstreams: list[str], work: Path, timeout: float = 10.0, port: int | None = None) -> Proxy:
    work.chmod(0o755)  # nginx's workers run as an unprivileged user
    static = work / "static"
    static.mkdir(exist_ok=True)
    port = port or free_port()
    (work / "site.conf").write_text(site_config(upstreams, static, port), encoding="utf-8")
    (work / "nginx.conf").write_text(
        f"daemon off;\npid {work}/nginx.pid;\nerror_log {work}/error.log;\nevents {{}}\n"
        f"http {{\n  access_log {work}/access.log;\n  client_body_temp_path {work}/body;\n"
        f"  proxy_temp_path {work}/proxy;\n  include {work}/site.conf;\n}}\n",
        encoding="utf-8",
    )
    process = subprocess.Popen([NGINX, "-c", str(work / "nginx.conf")], stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return Proxy(port, work / "access.log", process)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stderr = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"nginx did not start: {stderr}") from None
            time.sleep(0.1)
