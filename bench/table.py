"""The ours/peer table of bench/compare.sh: `python -m bench.table RESULTS_DIR` (writes table.md there too).

RESULTS_DIR holds `{ours,peer}-{a,b,c}.json` from bench.serve and `{ours,peer}-rss.txt` (peak RSS in KiB).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

LOADS = {
    "a": "32 requests, concurrency 16, max_tokens 128, greedy",
    "b": "4 requests, concurrency 1, max_tokens 64, greedy",
    "c": "64 requests, shared 400-token system prompt, concurrency 16, max_tokens 32, greedy",
}
# (figure, how to read it, which way is better)
FIGURES: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
    ("request throughput (req/s)", lambda d: d["request_throughput"], "higher"),
    ("output tok/s", lambda d: d["output_throughput"], "higher"),
    ("total tok/s", lambda d: d["total_token_throughput"], "higher"),
    ("TTFT mean (ms)", lambda d: d["ttft_ms"]["mean"], "lower"),
    ("TTFT p50 (ms)", lambda d: d["ttft_ms"]["p50"], "lower"),
    ("TTFT p99 (ms)", lambda d: d["ttft_ms"]["p99"], "lower"),
    ("TPOT mean (ms)", lambda d: d["tpot_ms"]["mean"], "lower"),
    ("TPOT p50 (ms)", lambda d: d["tpot_ms"]["p50"], "lower"),
    ("TPOT p99 (ms)", lambda d: d["tpot_ms"]["p99"], "lower"),
    ("ITL mean (ms)", lambda d: d["itl_ms"]["mean"], "lower"),
    ("ITL p50 (ms)", lambda d: d["itl_ms"]["p50"], "lower"),
    ("ITL p99 (ms)", lambda d: d["itl_ms"]["p99"], "lower"),
    ("E2E mean (ms)", lambda d: d["e2e_ms"]["mean"], "lower"),
    ("E2E p50 (ms)", lambda d: d["e2e_ms"]["p50"], "lower"),
    ("E2E p99 (ms)", lambda d: d["e2e_ms"]["p99"], "lower"),
    ("output tokens", lambda d: d["total_output_tokens"], "-"),
    ("errors", lambda d: d["errors"], "lower"),
    ("cut at the time limit / not sent", lambda d: d.get("cut_at_time_limit", 0) + d.get("not_sent", 0), "-"),
    ("load duration (s)", lambda d: d["duration_s"], "-"),
]
# Issue 4's targets: (load, figure, limit on ours/peer, "min" = at least, "max" = at most)
TARGETS = [
    ("a", "output tok/s", 3.0, "min"),
    ("a", "TTFT p50 (ms)", 0.5, "max"),
    ("b", "ITL p50 (ms)", 0.5, "max"),
    ("c", "TTFT p50 (ms)", 1 / 3, "max"),
]


def load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def rss_mib(path: Path) -> float | None:
    try:
        return int(path.read_text(encoding="utf-8").split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        return None


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.2f}"


def ratio(ours: float | None, peer: float | None) -> float | None:
    if ours is None or peer is None or peer == 0:
        return None
    return ours / peer


def target_note(key: str, name: str, r: float | None) -> str:
    for t_load, t_name, limit, kind in TARGETS:
        if (t_load, t_name) == (key, name):
            met = r is not None and (r >= limit if kind == "min" else r <= limit)
            return f" ({'>=' if kind == 'min' else '<='}{limit:.2f} {'MET' if met else 'MISSED'})"
    return ""


def build(results: Path) -> str:
    """One row per figure; for each load: ours, peer, ours/peer (with issue 4's target where it has one)."""
    runs = {key: (load(results / f"ours-{key}.json"), load(results / f"peer-{key}.json")) for key in LOADS}
    keys = [key for key, (ours, peer) in runs.items() if ours or peer]
    header = "| figure | " + " | ".join(f"({k}) ours | ({k}) peer | ({k}) ours/peer" for k in keys) + " |"
    lines = [header, "|---|" + "---:|---:|---|" * len(keys)]
    for name, read, _better in FIGURES:
        cells = []
        for key in keys:
            ours, peer = runs[key]
            a = read(ours) if ours else None
            b = read(peer) if peer else None
            r = ratio(a, b)
            cells += [fmt(a), fmt(b), fmt(r) + target_note(key, name, r)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ours_rss, peer_rss = rss_mib(results / "ours-rss.txt"), rss_mib(results / "peer-rss.txt")
    rss = f"{fmt(ours_rss)} | {fmt(peer_rss)} | {fmt(ratio(ours_rss, peer_rss))}"
    lines.append(f"| peak RSS, whole run (MiB) | {rss} |" + " | | |" * (len(keys) - 1))
    legend = [f"({key}) {LOADS[key]}" for key in keys]
    setup = results / "setup.txt"
    if setup.exists():  # dtypes and threads of the run, written by compare.sh
        legend += setup.read_text(encoding="utf-8").splitlines()
    return "\n".join([*legend, "", *lines])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    results = Path(args[0])
    table = build(results)
    (results / "table.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
