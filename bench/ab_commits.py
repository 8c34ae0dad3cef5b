"""Our server at two git revisions in one run, same machine, same minutes: ratios head/base per round.

    python -m bench.ab_commits --base HEAD~1                  # vs this working tree, uncommitted included
    python -m bench.ab_commits --base 1a2b3c --head 4d5e6f --rounds 5 --loads "a c" --time-scale 0.5
    python -m bench.ab_commits --base HEAD~1 --smoke          # 2 requests of 4 tokens, 1 round: plumbing only
    make bench-ab BASE=1a2b3c

A revision is checked out as a detached worktree under $TMPDIR/mooncake-ab/<sha> (reused later); --head
also takes a directory holding a tree. Both servers run the main tree's .venv python with cwd and
PYTHONPATH set to their tree, the same model, mooncake.yaml and MOONCAKE_CACHE_DIR, as bench/compare.sh
starts ours (its knobs BENCH_KV_BYTES, BENCH_OURS_DTYPE, BENCH_OURS_QUANT, BENCH_THREADS apply). Both
start up front; every round runs each load (compare.sh's a/b/c) on both, the first side alternating per
round (ABBA) to cancel drift.
Results: bench/results/ab-<timestamp>/ (results.json, table.md, one JSON per measurement, server logs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import serve
from bench.table import FIGURES, fmt, ratio
from bench.table import LOADS as LOAD_NAMES

ROOT = Path(__file__).resolve().parent.parent
# load: (time limit in s, bench.serve arguments), as bench/compare.sh defines them
LOADS: dict[str, tuple[float, str]] = {
    "a": (150, "--dataset fixed --num-prompts 32 --max-concurrency 16 --max-tokens 128"),
    "b": (60, "--dataset fixed --num-prompts 4 --max-concurrency 1 --max-tokens 64"),
    "c": (150, "--dataset shared-prefix --shared-prefix-len 400 --num-prompts 64 --max-concurrency 16 "
               "--max-tokens 32"),
}  # fmt: skip
METRICS = ("output tok/s", "request throughput (req/s)", "TTFT p50 (ms)", "TPOT p50 (ms)", "ITL p50 (ms)",
           "E2E p50 (ms)")  # fmt: skip
SIDES = ("base", "head")


def log(message: str) -> None:
    print(f"[ab {time.strftime('%H:%M:%S', time.gmtime())}] {message}", file=sys.stderr, flush=True)


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


# Outside the project: an old revision's files must not read as part of this tree (linters, searches).
WORKTREES = Path(tempfile.gettempdir()) / "mooncake-ab"


def checkout(rev: str) -> tuple[Path, str]:
    """A detached worktree of `rev` under WORKTREES, reused when one for the same commit is there."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = WORKTREES / sha[:12]
    if tree.exists():
        if git("rev-parse", "HEAD", cwd=tree) == sha:
            return tree, sha
        git("worktree", "remove", "--force", str(tree))
    git("worktree", "prune")
    git("worktree", "add", "--detach", str(tree), sha)
    return tree, sha


def describe(tree: Path, sha: str | None) -> str:
    if sha is not None:
        return sha
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", cwd=tree))
    return git("rev-parse", "HEAD", cwd=tree) + (" + uncommitted changes" if dirty else "")


def proc_tree(pid: int) -> list[int]:
    kids: list[int] = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            kids += [int(k) for k in path.read_text().split()]
    return [pid] + [p for k in kids for p in proc_tree(k)]


def peak_rss_kib(pid: int) -> int:
    total = 0
    for p in proc_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
            total += next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), 0)
    return total


def cpu_seconds(pid: int) -> float:
    ticks = 0
    for p in proc_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    side: str
    tree: Path
    rev: str
    log_path: Path
    data: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mooncake-ab-")))
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    model: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, python: str, config: str, extra_env: dict[str, str]) -> None:
        (self.data / "mooncake.yaml").write_text(config, encoding="utf-8")
        env = os.environ | extra_env | {
            "DJANGO_SETTINGS_MODULE": "webapp.settings.test", "MOONCAKE_DATA": str(self.data),
            "MOONCAKE_AUTOLOAD": "1", "MOONCAKE_API_AUTH": "off", "PYTHONUNBUFFERED": "1",
            "MOONCAKE_CONFIG": str(self.data / "mooncake.yaml"), "PYTHONPATH": str(self.tree),
        }  # fmt: skip
        migrate = [python, "manage.py", "migrate", "--noinput"]
        subprocess.run(migrate, cwd=self.tree, env=env, check=True, capture_output=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        log(f"{self.side}: {self.rev} from {self.tree} on {self.url} (log {self.log_path})")
        command = [python, "-m", "webapp.serving.server", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("wb") as out:
            # Its own session: a Ctrl-C reaches only us, and stop() ends both servers the same way.
            self.process = subprocess.Popen(
                command, cwd=self.tree, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def check_alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"the {self.side} server is not running; its log ends:\n" + "\n".join(tail))

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(httpx.HTTPError):
                response = httpx.get(self.url + "/health", timeout=5)
                if response.status_code == 200:
                    return
                if b'"failed"' in response.content:
                    raise RuntimeError(f"the {self.side} server failed to load its model: {response.text}")
            time.sleep(1)
        raise RuntimeError(f"the {self.side} server was not ready within {timeout:.0f} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.data, ignore_errors=True)


def model_dir() -> Path:
    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.source import resolve_source

    return ensure_converted(resolve_source("default"), Path(os.environ["MOONCAKE_CACHE_DIR"])).resolve()


def load_args(load: str, server: Server, opts: argparse.Namespace) -> argparse.Namespace:
    limit = LOADS[load][0] * opts.time_scale
    argv = [
        *("--base-url", server.url, "--tokenizer", str(opts.model_dir), "--count-tokens", "tokenizer"),
        *("--temperature", "0", *LOADS[load][1].split(), "--time-limit", str(limit)),
        *("--timeout", str(limit + 60), "--label", f"{server.side}-{load}"),
    ]
    if opts.smoke:
        argv += ["--num-prompts", "2", "--max-tokens", "4"]
    return serve.parse_args(argv)


def measure(
    server: Server, idle: Server, load: str, tok: serve.Tokenizer, opts: argparse.Namespace
) -> dict[str, Any]:
    server.check_alive()
    args = load_args(load, server, opts)
    prompts = serve.build_prompts(args, tok)
    loadavg, idle_cpu = os.getloadavg(), cpu_seconds(idle.pid)
    log(f"load ({load}) on {server.side}; load average {loadavg[0]:.2f} {loadavg[1]:.2f} {loadavg[2]:.2f}")
    results, duration = asyncio.run(serve.run_load(args, prompts, server.model, tok))
    report = serve.report(args, server.model, results, duration)
    # The other server should sleep meanwhile: its CPU seconds show whether it did.
    idle_cpu = cpu_seconds(idle.pid) - idle_cpu
    return dict(load=load, side=server.side, loadavg_before=loadavg, idle_cpu_s=idle_cpu, report=report)


def summarize(runs: list[dict[str, Any]], loads: list[str], rounds: int) -> dict[str, Any]:
    by = {(m["load"], m["side"], m["round"]): m["report"] for m in runs}
    out: dict[str, Any] = {}
    for load in loads:
        out[load] = {}
        for name, get, better in (f for f in FIGURES if f[0] in METRICS):
            base = [get(by[load, "base", r]) for r in range(rounds)]
            head = [get(by[load, "head", r]) for r in range(rounds)]
            ratios = [ratio(h, b) for h, b in zip(head, base, strict=True)]
            known = [r for r in ratios if r is not None]
            median = statistics.median(known) if known else None
            out[load][name] = dict(better=better, base=base, head=head, ratios=ratios, median=median)
        for side in SIDES:
            reports = [by[load, side, r] for r in range(rounds)]
            out[load][f"{side} errors/cut"] = [(d["errors"], d["cut_at_time_limit"]) for d in reports]
    return out


def markdown(summary: dict[str, Any], rss: dict[str, int], revs: dict[str, str]) -> str:
    def seq(values: list[Any], digits: str = "") -> str:
        return " / ".join("-" if v is None else format(v, digits) if digits else fmt(v) for v in values)

    lines = [
        f"base: {revs['base']}  \nhead: {revs['head']}  \nratio = head/base per round, then their median",
        "",
        "| load | figure | base per round | head per round | head/base per round | median |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for load, figures in summary.items():
        for name in METRICS:
            f = figures[name]
            median = "-" if f["median"] is None else f"**{f['median']:.3f}**"
            cells = [seq(f["base"]), seq(f["head"]), seq(f["ratios"], ".3f"), median]
            lines.append(f"| {load} | {name} ({f['better']} is better) | " + " | ".join(cells) + " |")
        errs = [" / ".join(f"{e}/{c}" for e, c in figures[f"{s} errors/cut"]) for s in SIDES]
        lines.append(f"| {load} | errors/cut | {errs[0]} | {errs[1]} | | |")
    mib = {s: rss[s] / 1024 for s in SIDES}
    r = fmt(ratio(mib["head"], mib["base"]))
    lines.append(f"| all | peak RSS (MiB) | {mib['base']:.0f} | {mib['head']:.0f} | | {r} |")
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="git revision of the baseline")
    p.add_argument("--head", help="git revision or tree directory (default: this working tree)")
    p.add_argument("--rounds", type=int, default=3)
    loads = "; ".join(f"{k}: {v}" for k, v in LOAD_NAMES.items())
    p.add_argument("--loads", default="a b c", help=f"of bench/compare.sh ({loads})")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiplies each load's time limit")
    p.add_argument("--smoke", action="store_true", help="2 requests of 4 tokens per load, 1 round")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / time.strftime("ab-%Y%m%d-%H%M%S"))
    opts = p.parse_args(argv)
    opts.loads = opts.loads.split()
    if unknown := [x for x in opts.loads if x not in LOADS]:
        p.error(f"unknown loads {unknown}; known: {sorted(LOADS)}")
    opts.rounds = 1 if opts.smoke else opts.rounds
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))  # so that `finally` runs
    opts.out.mkdir(parents=True, exist_ok=True)
    cache = Path(os.environ.get("MOONCAKE_CACHE_DIR") or ROOT / "var" / "cache")
    os.environ["MOONCAKE_CACHE_DIR"] = str(cache.resolve())
    python = ROOT / ".venv" / "bin" / "python"
    threads = os.environ.get("BENCH_THREADS")
    extra_env = {"MOONCAKE_CPU_THREADS": threads, "OMP_NUM_THREADS": threads} if threads else {}
    config = (
        f"model:\n  model_id: default\n  dtype: {os.environ.get('BENCH_OURS_DTYPE', 'auto')}\n"
        f"  quantization: {os.environ.get('BENCH_OURS_QUANT', 'none')}\n"
        f"engine:\n  kv_cache_memory_bytes: {os.environ.get('BENCH_KV_BYTES', '805306368')}\n"
    )
    trees: dict[str, tuple[Path, str | None]] = {"base": checkout(opts.base), "head": (ROOT, None)}
    if opts.head is not None:
        trees["head"] = (Path(opts.head).resolve(), None) if Path(opts.head).is_dir() else checkout(opts.head)
    revs = {side: describe(tree, sha) for side, (tree, sha) in trees.items()}
    servers = {s: Server(s, tree, revs[s], opts.out / f"{s}-server.log") for s, (tree, _) in trees.items()}
    opts.model_dir = model_dir()
    log(f"model directory: {opts.model_dir}; load average {os.getloadavg()} on {os.cpu_count()} cores")
    runs: list[dict[str, Any]] = []
    try:
        for server in servers.values():  # both load their model at once, then idle in turn
            server.start(str(python if python.exists() else sys.executable), config, extra_env)
        tok = serve.Tokenizer(str(opts.model_dir))
        for server in servers.values():
            server.wait_ready()
            args = load_args("b", server, opts)
            server.model = serve.discover_model(args)
            asyncio.run(serve.warm_up(args, server.model))
        for rnd in range(opts.rounds):
            order = SIDES if rnd % 2 == 0 else SIDES[::-1]
            log(f"round {rnd + 1}/{opts.rounds}: {order[0]} first")
            for load in opts.loads:
                for side, other in (order, order[::-1]):
                    run = {"round": rnd} | measure(servers[side], servers[other], load, tok, opts)
                    (opts.out / f"{side}-{load}-r{rnd}.json").write_text(json.dumps(run, indent=1))
                    runs.append(run)
        rss = {side: peak_rss_kib(server.pid) for side, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    summary = summarize(runs, opts.loads, opts.rounds)
    table = markdown(summary, rss, revs)
    result = {
        "revisions": revs, "trees": {s: str(t) for s, (t, _) in trees.items()}, "rounds": opts.rounds,
        "loads": opts.loads, "time_scale": opts.time_scale, "smoke": opts.smoke, "config": config,
        "threads": threads, "peak_rss_kib": rss, "summary": summary, "runs": runs,
    }  # fmt: skip
    (opts.out / "results.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    (opts.out / "table.md").write_text(table, encoding="utf-8")
    print(table)
    log(f"results in {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
