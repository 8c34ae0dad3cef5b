"""Soak test: a real server under a small mixed load for a long time, watching its memory and its errors.

    python bench/soak.py [--minutes 30] [--clients 2] [--warmup-minutes 2] [--json out.json]

Starts `python -m webapp.serving.server` with the default model, a fresh data directory and API auth off
(the test suite's live-server helper), then each client loops until the time is up over: streamed and
plain chat completions (max_tokens 8-64), plain completions, streams it drops after a few chunks, and bad
requests (malformed JSON, out-of-range parameters) that must be 4xx. Every --sample-seconds it records the
server's RSS (children included) and the outcome counts. The table at the end gives RSS after the warm-up,
at the end, and its growth per hour (least squares over the post-warm-up samples); 5xx should be 0.
The server's output goes to server.log in the data directory, which is kept and printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a script, as documented

from bench.prompts import question
from tests.conftest import LiveDaphne, start_live_daphne, stop_live_daphne

MiB = 2**20
OUTCOMES = ("ok", "4xx", "5xx", "disconnect", "transport_error", "unexpected")
JSON = {"Content-Type": "application/json"}
# (kind, weight): most traffic is ordinary; drops and bad requests are the paths that could leak.
MIX: list[tuple[str, int]] = [
    ("chat_stream", 30),
    ("chat", 25),
    ("completion", 10),
    ("stream_drop", 15),
    ("bad_json", 5),
    ("bad_param", 15),
]
BAD_PARAMS: list[dict[str, Any]] = [
    {"temperature": 5},
    {"max_tokens": 0},
    {"top_p": 1.5},
    {"n": 0},
    {"logit_bias": {"abc": 1}},
    {"messages": []},
    {"messages": [{"role": "wizard", "content": "hi"}]},
    {"response_format": {"type": "json_schema"}},
]


@dataclass
class Sample:
    elapsed_s: float
    rss_mib: float
    counts: dict[str, int]


def server_rss_mib(pid: int) -> float:
    """Resident memory of the server and every process under it."""
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / MiB


def chat_body(rng: random.Random, model: str, *, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": question(rng.randrange(1000))}],
        "max_tokens": rng.randint(8, 64),
        "temperature": rng.choice([0.0, 0.7, 1.0]),
        "stream": stream,
    }


async def one_request(client: httpx.AsyncClient, kind: str, rng: random.Random, model: str) -> str:
    """Sends one request of `kind` and names its outcome: ok, 4xx, 5xx, disconnect or unexpected."""
    if kind == "bad_json":
        response = await client.post("/v1/chat/completions", content=b'{"messages": [', headers=JSON)
        return classify(response.status_code, expect_ok=False)
    if kind == "bad_param":
        body = {**chat_body(rng, model, stream=rng.random() < 0.5), **rng.choice(BAD_PARAMS)}
        response = await client.post("/v1/chat/completions", json=body)
        return classify(response.status_code, expect_ok=False)
    if kind == "completion":
        body = {"model": model, "prompt": question(rng.randrange(1000)), "max_tokens": rng.randint(8, 64)}
        response = await client.post("/v1/completions", json=body)
        return classify(response.status_code, expect_ok=True)
    if kind == "chat":
        response = await client.post("/v1/chat/completions", json=chat_body(rng, model, stream=False))
        return classify(response.status_code, expect_ok=True)
    drop_after = rng.randint(1, 4) if kind == "stream_drop" else None
    body = chat_body(rng, model, stream=True)
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return classify(response.status_code, expect_ok=True)
        chunks = 0
        async for _ in response.aiter_bytes():
            chunks += 1
            if drop_after is not None and chunks >= drop_after:
                return "disconnect"  # leaving the block closes the connection mid-stream
    return "ok"


def classify(status: int, *, expect_ok: bool) -> str:
    if status >= 500:
        return "5xx"
    if 200 <= status < 300:
        return "ok" if expect_ok else "unexpected"
    if 400 <= status < 500:
        return "4xx" if not expect_ok else "unexpected"
    return "unexpected"


async def client_loop(
    base_url: str, model: str, seed: int, deadline: float, counts: Counter[str], failures: list[str]
) -> None:
    rng = random.Random(seed)
    kinds, weights = zip(*MIX, strict=True)
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(120.0)) as client:
        while time.monotonic() < deadline:
            kind = rng.choices(kinds, weights)[0]
            try:
                outcome = await one_request(client, kind, rng, model)
            except httpx.HTTPError as exc:
                outcome = "transport_error"
                failures.append(f"{kind}: {type(exc).__name__}: {exc}")
            if outcome in ("5xx", "unexpected"):
                failures.append(f"{kind}: {outcome}")
            counts[outcome] += 1
            counts["requests"] += 1


async def sampler(
    pid: int, started: float, deadline: float, every: float, counts: Counter[str], samples: list[Sample]
) -> None:
    while True:
        samples.append(Sample(time.monotonic() - started, server_rss_mib(pid), dict(counts)))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await asyncio.sleep(min(every, remaining))


async def drive(server: LiveDaphne, args: argparse.Namespace) -> dict[str, Any]:
    assert server.process is not None
    models = httpx.get(server.url + "/v1/models", timeout=30).json()["data"]
    model = str(models[0]["id"])
    counts: Counter[str] = Counter()
    failures: list[str] = []
    samples: list[Sample] = []
    started = time.monotonic()
    deadline = started + args.minutes * 60
    clients = [
        client_loop(server.url, model, args.seed + i, deadline, counts, failures) for i in range(args.clients)
    ]
    await asyncio.gather(
        sampler(server.process.pid, started, deadline, args.sample_seconds, counts, samples), *clients
    )
    # The last sample is taken at the deadline, before the clients' final requests finish: retake it.
    samples.append(Sample(time.monotonic() - started, server_rss_mib(server.process.pid), dict(counts)))
    return summarize(args, model, time.monotonic() - started, counts, failures, samples)


def summarize(
    args: argparse.Namespace,
    model: str,
    duration: float,
    counts: Counter[str],
    failures: list[str],
    samples: list[Sample],
) -> dict[str, Any]:
    warm = min(args.warmup_minutes * 60, duration / 2)  # a short run still keeps half its samples to fit
    after = [s for s in samples if s.elapsed_s >= warm]
    slope = None
    if len(after) >= 2:
        hours = [s.elapsed_s / 3600 for s in after]
        slope = statistics.linear_regression(hours, [s.rss_mib for s in after]).slope
    return {
        "model": model,
        "minutes": args.minutes,
        "clients": args.clients,
        "duration_s": round(duration, 1),
        "warmup_s": round(warm, 1),
        "requests": counts["requests"],
        "outcomes": {
            k: counts[k] for k in ("ok", "4xx", "5xx", "disconnect", "transport_error", "unexpected")
        },
        "rss_start_mib": round(after[0].rss_mib, 1) if after else None,
        "rss_end_mib": round(samples[-1].rss_mib, 1),
        "rss_peak_mib": round(max(s.rss_mib for s in samples), 1),
        "rss_growth_mib_per_hour": None if slope is None else round(slope, 1),
        "post_warmup_samples": len(after),
        "failure_samples": failures[:20],
        "samples": [asdict(s) for s in samples],
    }


def print_table(result: dict[str, Any], log_path: Path) -> None:
    outcomes = result["outcomes"]
    growth = result["rss_growth_mib_per_hour"]
    rows = [
        ("Model", result["model"]),
        ("Duration (s)", f"{result['duration_s']:.0f} ({result['clients']} clients)"),
        ("Requests", str(result["requests"])),
        ("  ok", str(outcomes["ok"])),
        ("  4xx (bad requests, expected)", str(outcomes["4xx"])),
        ("  dropped mid-stream", str(outcomes["disconnect"])),
        ("  5xx (should be 0)", str(outcomes["5xx"])),
        ("  transport errors / unexpected", f"{outcomes['transport_error']} / {outcomes['unexpected']}"),
        (f"RSS after warm-up ({result['warmup_s']:.0f} s) (MiB)", str(result["rss_start_mib"])),
        ("RSS at end (MiB)", str(result["rss_end_mib"])),
        ("RSS peak (MiB)", str(result["rss_peak_mib"])),
        (
            f"RSS growth (MiB/h, fit over {result['post_warmup_samples']} samples)",
            "n/a" if growth is None else f"{growth:+.1f}",
        ),
    ]
    print(f"{' Soak ':=^72}")
    for name, value in rows:
        print(f"{name:<52}{value:>20}")
    print("=" * 72)
    for failure in result["failure_samples"]:
        print(f"failure: {failure}", file=sys.stderr)
    print(f"server log: {log_path}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="load duration, warm-up included")
    parser.add_argument("--clients", type=int, default=2, help="concurrent clients")
    parser.add_argument("--warmup-minutes", type=float, default=2.0, help="at most half the run")
    parser.add_argument("--sample-seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None, help="server data dir (default: a new temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data = args.data or Path(tempfile.mkdtemp(prefix="mooncake-soak-"))
    print(f"starting the server (data {data}) ...", flush=True)
    server = start_live_daphne(data, api_auth="off")
    try:
        print(f"server up at {server.url}; load for {args.minutes:g} min", flush=True)
        result = asyncio.run(drive(server, args))
    finally:
        stop_live_daphne(server)
    result["server_log"] = str(server.log_path)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print_table(result, server.log_path)
    return 1 if result["outcomes"]["5xx"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
