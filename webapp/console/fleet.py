"""The live dashboard across replicas: each live replica's latest sample, and their total.

Every replica samples its own engines and process (console.dashboard) and writes its latest sample to its
heartbeat row (console.replication). This replica's own figures are taken live, fresher than its row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.utils import timezone

from webapp.console.models import Replica
from webapp.console.replication import live_replicas

SUMMED = (
    "tokens_per_s",
    "prompt_tokens_per_s",
    "running",
    "waiting",
    "preemptions",
    "aborts",
    "rss_mb",
    "cpu_percent",
)
# Percentiles cannot be summed or averaged into the fleet's percentile without the raw latencies: the total
# shows the worst replica's.
WORST = ("ttft_p50", "ttft_p95", "itl_p50", "itl_p95")
# The fullest KV cache and the busiest GPU: a sum or mean of fractions would hide the one near its limit.
HIGHEST = ("kv_usage", "gpu_util")

Sample = Mapping[str, Any]  # console.dashboard.Sample as a dict, possibly from another replica's row


def _numbers(samples: Sequence[Sample], key: str) -> list[float]:
    return [v for s in samples if isinstance(v := s.get(key), int | float) and not isinstance(v, bool)]


def total(samples: Sequence[Sample], *, client_errors: int, server_errors: int) -> dict[str, Any]:
    """The replicas' samples combined; the error counts are the shared request log's, taken once.

    Each sample's counts hold every replica's failed responses (the request log is shared), so adding them
    would count each error once per replica. Aborts are each replica's own engines': those add up.
    """
    combined: dict[str, Any] = {"t": max(_numbers(samples, "t"), default=None)}
    for key in SUMMED:
        combined[key] = sum(_numbers(samples, key))
    for key in (*WORST, *HIGHEST):
        combined[key] = max(_numbers(samples, key), default=None)
    if combined["kv_usage"] is None:
        combined["kv_usage"] = 0.0
    gpu = _numbers(samples, "gpu_mem_mb")
    combined["gpu_mem_mb"] = sum(gpu) if gpu else None  # None: no replica has a GPU
    combined["client_errors"] = client_errors
    combined["server_errors"] = server_errors
    return combined


def _row(name: str, seen_at: dt.datetime, now: dt.datetime, *, this: bool, sample: Any) -> dict[str, Any]:
    return {
        "name": name,
        "seen_at": seen_at.isoformat(),
        "age_s": round(max(0.0, (now - seen_at).total_seconds()), 1),
        "this": this,
        # A replica that has not sampled yet (just started) is listed without figures.
        "sample": dict(sample) if isinstance(sample, Mapping) else None,
    }


def replica_rows(
    this_name: str, this_sample: Sample, replicas: Iterable[Replica], now: dt.datetime
) -> list[dict[str, Any]]:
    """One row per live replica, by name; this replica's from `this_sample`, listed even before its
    first heartbeat (or when it cannot write one)."""
    rows = [
        _row(this_name, now, now, this=True, sample=this_sample)
        if replica.name == this_name
        else _row(replica.name, replica.seen_at, now, this=False, sample=replica.sample)
        for replica in replicas
    ]
    if not any(row["this"] for row in rows):
        rows.append(_row(this_name, now, now, this=True, sample=this_sample))
    return sorted(rows, key=lambda row: row["name"])


def snapshot(this_name: str, this_sample: Sample) -> dict[str, Any]:
    """The dashboard's fleet figures: {"total": ..., "replicas": [...]}."""
    rows = replica_rows(this_name, this_sample, live_replicas(), timezone.now())
    samples = [row["sample"] for row in rows if row["sample"] is not None]
    # This replica's counts cover its latest sample's window, as its own row's do.
    client, server = (this_sample.get(key) for key in ("client_errors", "server_errors"))
    return {
        "total": total(
            samples,
            client_errors=client if isinstance(client, int) else 0,
            server_errors=server if isinstance(server, int) else 0,
        ),
        "replicas": rows,
    }
