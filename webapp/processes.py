"""The processes `mooncake serve` runs, the web server and a Celery worker, and their supervisor."""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

CHILD_POLL_SECONDS = 0.5
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork: the child only calls it


def _die_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGTERM when `mooncake serve` dies, even by SIGKILL, so
    no orphaned server keeps the port and the model's memory from the supervisor's restart."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def worker_command() -> list[str]:
    """The Celery worker `serve` runs beside the server; on one node it also runs the periodic jobs."""
    return [
        sys.executable, "-m", "celery", "-A", "webapp", "worker", "--loglevel", "INFO",
        "--without-gossip", "--without-mingle", "--hostname", f"mooncake@{socket.gethostname()}",
        "--beat",  # request-log pruning (settings.CELERY_BEAT_SCHEDULE)
    ]  # fmt: skip


def port_taken(host: str, port: int) -> OSError | None:
    """Why the server could not listen on host:port now (another process holds it), or None: binding
    the way Daphne does (SO_REUSEADDR), then letting go at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as exc:
            return exc
    return None


def wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection((probe_host, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.2)
    return False


class Supervisor:
    """Runs the server and the worker as children in their own sessions, and stops them together."""

    def __init__(self, commands: dict[str, list[str]], *, stop_timeout: Callable[[], float]) -> None:
        self.commands = commands
        self.stop_timeout = stop_timeout
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.signals_received = 0

    def start(self) -> None:
        for name, command in self.commands.items():
            # A session of their own: Ctrl-C reaches only us, and we forward exactly one SIGTERM. Started
            # from the main thread, which lives as long as we do (PDEATHSIG fires when the forking thread
            # ends).
            self.children[name] = subprocess.Popen(
                command, start_new_session=True, preexec_fn=_die_with_parent
            )

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals_received += 1
        if self.signals_received == 1:
            print(
                "\nmooncake: stopping (running generations may finish; Ctrl-C again to stop now)", flush=True
            )
            self._send(signal.SIGTERM)
        else:
            # The server stops at once on its second signal; Celery's SIGQUIT is its cold shutdown.
            self._send(signal.SIGINT, only="server")
            self._send(signal.SIGQUIT, only="worker")

    def _send(self, signum: int, only: str | None = None) -> None:
        for name, child in self.children.items():
            if (only is None or name == only) and child.poll() is None:
                child.send_signal(signum)

    def wait(self) -> int:
        """Returns when every child is gone; a child that dies on its own takes the others down."""
        while True:
            if self.signals_received:
                return self._reap()
            for name, child in self.children.items():
                code = child.poll()
                if code is not None:
                    print(f"mooncake: {name} exited with status {code}; stopping the rest", flush=True)
                    self.signals_received = 1
                    self._send(signal.SIGTERM)
                    self._reap()
                    return code or 1
            time.sleep(CHILD_POLL_SECONDS)

    def _reap(self) -> int:
        # Read at the stop, not at start: an admin may have changed the drain timeout meanwhile.
        deadline = time.monotonic() + self.stop_timeout()
        status = 0
        for name, child in self.children.items():
            try:
                code = child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"mooncake: {name} did not stop in time; killing it", flush=True)
                child.kill()
                code = child.wait()
            if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                print(f"mooncake: {name} exited with status {code} while stopping", flush=True)
                status = status or 1
        return status
