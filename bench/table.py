"""The tables of bench/compare.sh: `python -m bench.table RESULTS_DIR` (writes table.md there too).

RESULTS_DIR holds `<server>-<load>.json` from bench.serve and `<server>-rss.txt` (peak RSS in KiB), where the
servers are `ours`, `llama` (llama-server), `transformers` (`transformers serve`; `peer` in older folders),
and `ours-spec` / `llama-spec` (the same servers with n-gram speculation, load (e) only).
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
    "d": "64 requests of (a), Poisson arrivals at 0.8x the server's own (a) request rate, max_tokens 128",
    "e": "16 edit-a-given-text requests, concurrency 4, max_tokens 256, greedy; speculation off and on",
    "p": "4 distinct 1,000-token prompts, concurrency 1, max_tokens 1: the prefill rate",
}
# (figure, how to read it, which way is better)
FIGURES: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
    ("request throughput (req/s)", lambda d: d["request_throughput"], "higher"),
    ("output tok/s", lambda d: d["output_throughput"], "higher"),
    ("total tok/s", lambda d: d["total_token_throughput"], "higher"),
    ("prompt tok/s to first token", lambda d: d.get("prompt_throughput", 0.0), "higher"),
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
# The peers, in column order: (file prefix, older file prefix, column name)
PEERS = [("llama", None, "llama-server"), ("transformers", "peer", "transformers")]
# Targets on ours/peer: (load, figure, limit, "min" = at least, "max" = at most). Against llama-server: this
# issue's; against transformers serve: issue 4's.
TARGETS: dict[str, list[tuple[str, str, float, str]]] = {
    "llama": [
        ("a", "output tok/s", 1.5, "min"),
        ("a", "TTFT p50 (ms)", 1.0, "max"),
        ("b", "ITL p50 (ms)", 1.25, "max"),
        ("c", "TTFT p50 (ms)", 0.5, "max"),
        ("p", "prompt tok/s to first token", 1.5, "min"),
    ],
    "transformers": [
        ("a", "output tok/s", 3.0, "min"),
        ("a", "TTFT p50 (ms)", 0.5, "max"),
        ("b", "ITL p50 (ms)", 0.5, "max"),
        ("c", "TTFT p50 (ms)", 1 / 3, "max"),
    ],
}
# Load (e)'s rows: speculation off and on, per server.
SPEC_FIGURES = [
    "output tok/s",
    "TTFT p50 (ms)",
    "TPOT p50 (ms)",
    "ITL p50 (ms)",
    "ITL p99 (ms)",
    "E2E p50 (ms)",
    "output tokens",
    "errors",
    "cut at the time limit / not sent",
]
SERVER_NAMES = {
    "ours": "ours",
    "ours-spec": "ours, speculation on",
    "llama": "llama-server",
    "llama-spec": "llama-server, n-gram speculation",
    "transformers": "transformers serve",
}


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


def figure(name: str) -> Callable[[dict[str, Any]], float]:
    return next(read for fig, read, _ in FIGURES if fig == name)


def value(data: dict[str, Any] | None, name: str) -> float | None:
    return figure(name)(data) if data else None


def target_of(peer: str, key: str, name: str) -> tuple[float, str] | None:
    for t_load, t_name, limit, kind in TARGETS.get(peer, []):
        if (t_load, t_name) == (key, name):
            return limit, kind
    return None


def verdict(r: float | None, limit: float, kind: str) -> str:
    met = r is not None and (r >= limit if kind == "min" else r <= limit)
    return f"{'>=' if kind == 'min' else '<='}{limit:.2f} {'met' if met else 'MISSED'}"


def target_note(peer: str, key: str, name: str, r: float | None) -> str:
    target = target_of(peer, key, name)
    return f" ({verdict(r, *target)})" if target else ""


class Results:
    """The JSON files and peak RSS figures of one results folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def run(self, server: str, key: str, old: str | None = None) -> dict[str, Any] | None:
        data = load(self.folder / f"{server}-{key}.json")
        if data is None and old:
            data = load(self.folder / f"{old}-{key}.json")
        return data

    def rss(self, server: str, old: str | None = None) -> float | None:
        mib = rss_mib(self.folder / f"{server}-rss.txt")
        if mib is None and old:
            mib = rss_mib(self.folder / f"{old}-rss.txt")
        return mib

    def peers(self) -> list[tuple[str, str | None, str]]:
        """The peers with any result in the folder."""
        return [
            (peer, old, title)
            for peer, old, title in PEERS
            if any(self.run(peer, key, old) for key in LOADS) or self.rss(peer, old) is not None
        ]


def targets_table(res: Results) -> list[str]:
    lines = ["| target | ours | peer | ours/peer | limit |", "|---|---:|---:|---:|---|"]
    for peer, old, title in res.peers():
        for key, name, limit, kind in TARGETS[peer]:
            a, b = value(res.run("ours", key), name), value(res.run(peer, key, old), name)
            r = ratio(a, b)
            cells = [fmt(a), fmt(b), fmt(r), verdict(r, limit, kind)]
            lines.append(f"| ({key}) {name} vs {title} | " + " | ".join(cells) + " |")
    return lines if len(lines) > 2 else []


def load_table(res: Results, key: str) -> list[str]:
    """One row per figure: ours, then per peer its figure and ours/peer (with the target where it has one)."""
    peers = res.peers()
    ours = res.run("ours", key)
    runs = [(peer, res.run(peer, key, old)) for peer, old, _ in peers]
    if ours is None and not any(data for _, data in runs):
        return []
    head = "| figure | ours | " + " | ".join(f"{title} | ours/{title}" for _, _, title in peers) + " |"
    lines = [head, "|---|---:|" + "---:|---|" * len(peers)]
    for name, read, _better in FIGURES:
        a = read(ours) if ours else None
        cells = [fmt(a)]
        for peer, data in runs:
            b = read(data) if data else None
            r = ratio(a, b)
            cells += [fmt(b), fmt(r) + target_note(peer, key, name, r)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def rates_line(res: Results) -> str:
    rates = []
    for server, old in (("ours", None), ("llama", None), ("transformers", "peer")):
        data = res.run(server, "d", old)
        if data:
            rate = data.get("request_rate")
            rates.append(f"{SERVER_NAMES[server]} {rate if isinstance(rate, str) else f'{rate:.3f}'} req/s")
    return "(d) Poisson rates: " + ", ".join(rates) if rates else ""


def acceptance(data: dict[str, Any] | None) -> str:
    if not data:
        return "-"
    spec = data.get("spec_decode") or {}
    if spec.get("draft_tokens") is None:
        return "n/a"
    rate = spec.get("acceptance_rate")
    if rate is None:
        return "none drafted"
    return f"{rate:.1%} ({spec['accepted_tokens']:.0f}/{spec['draft_tokens']:.0f})"


def spec_table(res: Results) -> list[str]:
    """Load (e): each server with speculation off and on, and on/off."""
    pairs = [("ours", "ours-spec"), ("llama", "llama-spec")]
    runs = {name: res.run(name, "e") for pair in pairs for name in pair}
    if not any(runs.values()):
        return []
    head = " | ".join(f"{SERVER_NAMES[off]} | {SERVER_NAMES[on]} | on/off" for off, on in pairs)
    lines = [f"| figure | {head} |", "|---|" + "---:|---:|---:|" * len(pairs)]
    for name in SPEC_FIGURES:
        cells = []
        for off, on in pairs:
            a, b = value(runs[off], name), value(runs[on], name)
            cells += [fmt(a), fmt(b), fmt(ratio(b, a))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for off, on in pairs:
        cells += [acceptance(runs[off]), acceptance(runs[on]), ""]
    lines.append("| draft acceptance rate (accepted/drafted) | " + " | ".join(cells) + " |")
    return lines


def rss_table(res: Results) -> list[str]:
    ours = res.rss("ours")
    lines = ["| server | peak RSS, whole run (MiB) | ours/that |", "|---|---:|---:|"]
    for server, old in (
        ("ours", None),
        ("ours-spec", None),
        ("llama", None),
        ("llama-spec", None),
        ("transformers", "peer"),
    ):
        mib = res.rss(server, old)
        if mib is not None:
            lines.append(f"| {SERVER_NAMES[server]} | {fmt(mib)} | {fmt(ratio(ours, mib))} |")
    return lines if len(lines) > 2 else []


def build(results: Path) -> str:
    res = Results(results)
    keys = [key for key in LOADS if res.run("ours", key) or any(res.run(p, key, o) for p, o, _ in PEERS)]
    out = [f"({key}) {LOADS[key]}" for key in keys]
    setup = results / "setup.txt"
    if setup.exists():  # cores, threads, dtypes and flags of the run, written by compare.sh
        out += setup.read_text(encoding="utf-8").splitlines()
    if rates := rates_line(res):
        out.append(rates)
    if targets := targets_table(res):
        out += ["", "Targets (ours/peer):", "", *targets]
    for key in keys:
        if key == "e":
            continue
        if table := load_table(res, key):
            out += ["", f"Load ({key}): {LOADS[key]}", "", *table]
    if "e" in keys and (table := spec_table(res)):
        out += ["", f"Load (e): {LOADS['e']}", "", *table]
    if table := rss_table(res):
        out += ["", "Memory:", "", *table]
    return "\n".join(out)


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
