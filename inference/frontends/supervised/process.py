"""An engine's own server (vLLM, SGLang, TGI) as a child process: its command line, start, health, stop.

The command line comes from one table per engine type, passing only the settings that are set. The child
runs in its own session (process group), so stopping it reaches the workers it forks for tensor
parallelism too, and the kernel stops it if this process dies (PR_SET_PDEATHSIG). Its output goes to a
log file whose tail every start error quotes. Restarting a child that died is the model manager's (see
inference.frontends.supervised.engine), with the back-off and bounds it applies to every engine.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from inference.config import EngineConfig

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"  # the child serves this process only
HEALTH_POLL_S = 0.5
STOP_GRACE_S = 30.0  # vLLM and SGLang free their GPUs within seconds of SIGTERM
LOG_TAIL_CHARS = 4000
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True, slots=True)
class ServerKind:
    """How one engine's server starts: what follows the executable, the model's flag (None: positional)
    and each setting's flag, in command-line order. A setting without a flag here is not passed; one whose
    value is True is a switch, passed alone."""

    name: str
    prefix: tuple[str, ...]
    model_flag: str | None
    flags: Mapping[str, str]
    health_path: str = "/health"
    api_path: str = "/v1"


SERVER_KINDS: dict[str, ServerKind] = {
    "vllm": ServerKind(  # vllm serve MODEL (docs.vllm.ai, "vllm serve" CLI)
        "vllm",
        ("serve",),
        None,
        {
            "host": "--host",
            "port": "--port",
            "served_model_name": "--served-model-name",
            "max_model_len": "--max-model-len",
            "gpu_memory_utilization": "--gpu-memory-utilization",
            "max_num_seqs": "--max-num-seqs",
            "tensor_parallel_size": "--tensor-parallel-size",
            "pipeline_parallel_size": "--pipeline-parallel-size",
            "expert_parallel": "--enable-expert-parallel",  # experts over the TP (x DP) GPUs
            "dtype": "--dtype",
        },
    ),
    "sglang": ServerKind(  # python -m sglang.launch_server (SGLang's server arguments)
        "sglang",
        ("-m", "sglang.launch_server"),
        "--model-path",
        {
            "host": "--host",
            "port": "--port",
            "tensor_parallel_size": "--tp-size",
            "pipeline_parallel_size": "--pp-size",
            # SGLang 0.5 and later: --ep-size N spreads the experts over N of the tensor-parallel GPUs
            # (its older switch, --enable-ep-moe, is deprecated there).
            "expert_parallel_size": "--ep-size",
            "max_model_len": "--context-length",
            "gpu_memory_utilization": "--mem-fraction-static",  # weights and KV cache: the same role
            "max_num_seqs": "--max-running-requests",
            "dtype": "--dtype",
            "served_model_name": "--served-model-name",
        },
    ),
    "tgi": ServerKind(  # text-generation-launcher (TGI's launcher arguments); it serves one model
        "tgi",
        (),
        "--model-id",
        {
            "host": "--hostname",
            "port": "--port",
            "tensor_parallel_size": "--num-shard",
            "max_model_len": "--max-total-tokens",
            "gpu_memory_utilization": "--cuda-memory-fraction",
            "max_num_seqs": "--max-concurrent-requests",
            "dtype": "--dtype",
        },
    ),
}


def server_command(config: EngineConfig, *, executable: str, port: int) -> list[str]:
    """The exact argv that starts config's engine server on HOST:port."""
    kind = SERVER_KINDS[config.engine_type]
    server = config.server()
    values: dict[str, Any] = {
        "host": HOST,
        "port": port,
        "served_model_name": config.remote().upstream_model or config.model,
        "max_model_len": config.max_model_len,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "max_num_seqs": config.max_num_seqs,
        "tensor_parallel_size": server.tensor_parallel_size,
        # Left out at 1 (every engine's default), so an engine version without the flag still starts.
        "pipeline_parallel_size": server.pipeline_parallel_size
        if server.pipeline_parallel_size > 1
        else None,
        "dtype": None if config.dtype == "auto" else config.dtype,
        "expert_parallel": True if server.expert_parallel else None,
        "expert_parallel_size": server.tensor_parallel_size if server.expert_parallel else None,
    }
    argv = [executable, *kind.prefix]
    argv += [config.model] if kind.model_flag is None else [kind.model_flag, config.model]
    for setting, flag in kind.flags.items():
        value = values[setting]
        if value is True:
            argv.append(flag)
        elif value is not None:
            argv += [flag, str(value)]
    return argv + list(server.extra_args)  # last: the operator's own flags win where an engine lets them


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class EngineServerError(RuntimeError):
    """The engine's server did not start (it exited, or did not answer /health in time)."""


# PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, and models load (and restart) on
# short-lived threads: every child is forked from this one thread, which lives as long as the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mooncake-engine-spawner")
_LIVE: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


class EngineProcess:
    def __init__(self, argv: list[str], *, health_url: str, log_path: Path, startup_timeout: float) -> None:
        self.argv = argv
        self.health_url = health_url
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.name = Path(argv[0]).name
        self.exit_error: str | None = None  # why it ended, when it ended on its own
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self._stopping = False
        self._on_exit: Callable[[str], None] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the child and block until its /health answers 200; EngineServerError (the log's tail
        quoted) if it exits first or takes longer than startup_timeout."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._log_start = log.tell()
            log.write(
                f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} mooncake starts: {' '.join(self.argv)}\n".encode()
            )
            log.flush()
            try:
                self._process = _SPAWNER.submit(_spawn, self.argv, log).result()
            except OSError as exc:
                raise EngineServerError(f"cannot start {self.argv[0]}: {exc}") from exc
        _LIVE.add(self)
        logger.info("Started %s (pid %d); its log: %s", self.name, self._process.pid, self.log_path)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        threading.Thread(target=self._watch, name=f"mooncake-watch-{self.name}", daemon=True).start()

    def _wait_healthy(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._process.poll()
            if code is not None:
                raise EngineServerError(
                    f"the {self.name} server exited with code {code} while starting; {self._tail_text()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.health_url, timeout=2.0).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise EngineServerError(
                    f"the {self.name} server did not answer {self.health_url} within "
                    f"{self.startup_timeout:.0f} s (engine.startup_timeout); {self._tail_text()}"
                )
            time.sleep(HEALTH_POLL_S)

    def on_exit(self, callback: Callable[[str], None]) -> None:
        """Call callback(why) when the child ends on its own (at once when it has already)."""
        self._on_exit = callback
        if self.exit_error is not None:
            callback(self.exit_error)

    def _watch(self) -> None:
        assert self._process is not None
        code = self._process.wait()
        if self._stopping:
            return
        _kill_group(self._process.pid, signal.SIGKILL)  # workers it forked would hold their GPUs
        self.exit_error = (
            f"the {self.name} server (pid {self._process.pid}) exited with code {code}; {self._tail_text()}"
        )
        logger.error("%s", self.exit_error)
        if self._on_exit is not None:
            self._on_exit(self.exit_error)

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM to its process group, SIGKILL after `grace` seconds; returns once the child is reaped."""
        process = self._process
        self._stopping = True
        if process is None:
            return
        _kill_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            logger.warning(
                "%s (pid %d) ignored SIGTERM for %.0f s: killing it", self.name, process.pid, grace
            )
        _kill_group(process.pid, signal.SIGKILL)  # the leader's workers too, whatever it did with them
        process.wait()
        _LIVE.discard(self)

    def log_tail(self) -> str:
        """What the child wrote since this start, its last LOG_TAIL_CHARS."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(self._log_start, log.seek(0, os.SEEK_END) - LOG_TAIL_CHARS))
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def _tail_text(self) -> str:
        tail = self.log_tail().strip()
        return f"its log {self.log_path} ends:\n{tail}" if tail else f"its log {self.log_path} is empty"


def _spawn(argv: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stop() signals its workers too
        preexec_fn=_die_with_parent,  # forked from the one spawner thread, see _SPAWNER
    )


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork: the child only calls it


def _die_with_parent() -> None:
    """In the child, before exec: the kernel sends SIGTERM when this process dies, even by SIGKILL."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _kill_group(pid: int, sig: signal.Signals) -> None:
    # The group id is the leader's pid; the kernel keeps it from reuse while any member lives.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@atexit.register
def _stop_all() -> None:
    """A server that exits without unloading its models still stops their engines' servers."""
    for process in list(_LIVE):
        process.stop(grace=5.0)
