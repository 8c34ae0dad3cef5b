"""Idle RSS of a fresh install: `mooncake serve` on a new data folder with the default settings, measured
once the bundled model is loaded and idle, against the 1 GB goal (issue 47).

    .venv/bin/python bench/idle_rss.py                     # this CPU's own path
    .venv/bin/python bench/idle_rss.py --cpu-isa avx2      # as on a CPU without AVX-512 (fp32 by default)
    .venv/bin/python bench/idle_rss.py --kv-cache-memory-bytes 2147483648   # the old fixed KV default

It prints the server process's RSS (the process that holds the model; the Celery worker apart), split
into anonymous and file-backed pages, beside what the memory plan (`mooncake check`) predicts for its
weights and KV cache and the KV cache the engine logged. A fresh data folder means a fresh cache folder
too, so the first start converts the GGUF where the path needs it (as a new install's does); --cache-dir
reuses one (a restart's case: no conversion in the process).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
GOAL_BYTES = 10**9  # "under 1 GB RSS", issue 47
MIB = 1 << 20


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu-isa", default=None, help="MOONCAKE_CPU_ISA: auto, avx512, avx2 or none")
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=None, help="an explicit KV budget")
    parser.add_argument("--kv-cache-dtype", default=None, help="auto, float32, bfloat16 or float16")
    parser.add_argument("--cache-dir", default=None, help="reuse this cache folder (default: a fresh one)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds the model may take to load")
    parser.add_argument("--settle", type=float, default=10.0, help="idle seconds before measuring")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mooncake-idle-rss-") as tmp:
        data = Path(tmp) / "data"
        env = _environment(args, data, Path(tmp))
        port = _free_port()
        log_path = Path(tmp) / "serve.log"
        with log_path.open("wb") as log:
            serve = subprocess.Popen(
                [str(REPO / ".venv" / "bin" / "mooncake"), "serve", "--port", str(port)],
                cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
            try:
                started = time.monotonic()
                _wait_healthy(port, serve, args.timeout)
                loaded_after = time.monotonic() - started
                time.sleep(args.settle)
                server = _server_process(serve.pid)
                report(server, serve.pid, log_path.read_text(errors="replace"), args, loaded_after)
            finally:
                os.killpg(serve.pid, signal.SIGTERM)  # its session: the supervisor and its children
                try:
                    serve.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(serve.pid, signal.SIGKILL)
    return 0


def _environment(args: argparse.Namespace, data: Path, tmp: Path) -> dict[str, str]:
    """The caller's environment less any Mooncake setting, so the defaults are a fresh install's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    env |= {"MOONCAKE_DATA": str(data), "PYTHONUNBUFFERED": "1"}
    if args.cpu_isa:
        env["MOONCAKE_CPU_ISA"] = args.cpu_isa
    if args.kv_cache_dtype:
        env["MOONCAKE_KV_CACHE_DTYPE"] = args.kv_cache_dtype
    if args.cache_dir:
        env["MOONCAKE_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    if args.kv_cache_memory_bytes is not None:  # no variable for it: a mooncake.yaml, as a user writes one
        config = tmp / "mooncake.yaml"
        config.write_text(f"engine:\n  kv_cache_memory_bytes: {args.kv_cache_memory_bytes}\n")
        env["MOONCAKE_CONFIG"] = str(config)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(port: int, serve: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"mooncake serve exited with {serve.returncode} before the model loaded")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1.0)
    raise SystemExit(f"the model was not loaded within {timeout:.0f} s")


def _server_process(supervisor: int) -> psutil.Process:
    """The child running webapp.serving.server: the process that loads the model."""
    for child in psutil.Process(supervisor).children(recursive=True):
        if "webapp.serving.server" in " ".join(child.cmdline()):
            return child
    raise SystemExit("no webapp.serving.server process under mooncake serve")


def report(
    server: psutil.Process, supervisor: int, log: str, args: argparse.Namespace, loaded_after: float
) -> None:
    status = _proc_status(server.pid)
    rss = status["VmRSS"]
    others = [p for p in psutil.Process(supervisor).children(recursive=True) if p.pid != server.pid]
    kv_bytes = args.kv_cache_memory_bytes or "default"
    print(f"settings: cpu_isa={args.cpu_isa or 'auto'} kv_cache_dtype={args.kv_cache_dtype or 'auto'}")
    print(f"  kv_cache_memory_bytes={kv_bytes}; healthy after {loaded_after:.0f} s")
    verdict = "met" if rss < GOAL_BYTES else "missed"
    goal = f"goal < {GOAL_BYTES / 1e9:.0f} GB: {verdict}"
    print(f"server RSS:      {rss / MIB:8.1f} MiB  ({rss / 1e9:.3f} GB; {goal})")
    anon = status["RssAnon"] / MIB
    print(f"  anonymous:     {anon:8.1f} MiB  (weights in memory, KV cache, Python heaps)")
    print(f"  file-backed:   {status['RssFile'] / MIB:8.1f} MiB  (shared libraries, mapped model files)")
    for other in others:
        name = "worker" if "celery" in " ".join(other.cmdline()) else other.name()
        print(f"other process:   {other.memory_info().rss / MIB:8.1f} MiB  ({name}, pid {other.pid})")
    kv = re.search(
        r"KV cache size: (\d+) tokens \(\d+ blocks x \d+, ([\d.]+) MiB in (\w+), from (.*)\);", log
    )
    if kv:
        tokens, size, dtype, source = kv.groups()
        print(f"KV cache (log):  {float(size):8.1f} MiB  ({tokens} tokens in {dtype}; {source})")
    plan = _planned(args)
    if plan:
        print(plan)


def _proc_status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of `pid`, in bytes (/proc/PID/status gives kB)."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def _planned(args: argparse.Namespace) -> str | None:
    """What the memory plan predicts for the bundled model under these settings (the same code as
    `mooncake check`), in this process."""
    sys.path.insert(0, str(REPO))
    from inference.config import EngineConfig
    from inference.config_groups import CpuKernelConfig
    from inference.manager.footprint import estimate, probe_device, read_shape
    from inference.manager.memory_plan import describe
    from inference.models.loader.source import default_gguf_path

    config = EngineConfig(
        cpu_isa=args.cpu_isa or "auto",
        kv_cache_dtype=args.kv_cache_dtype or "auto",
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
    )
    device = probe_device("cpu", CpuKernelConfig(cpu_isa=config.cpu_isa))
    footprint = estimate("default", "model", config, read_shape(default_gguf_path()), device)
    return f"memory plan:     {describe(footprint)}"


if __name__ == "__main__":
    sys.exit(main())
