"""The engine gauges on /metrics, for the reliability tests: read them, and wait for them to read zero."""

from __future__ import annotations

import re
import time

from tests.live_server import LiveDaphne

GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
_GAUGE_RE = re.compile(r"^mooncake:(\w+)\{[^}]*\}\s+(\S+)$")


def gauges(server: LiveDaphne) -> dict[str, float]:
    status, body = server.get("/metrics")
    assert status == 200, body[:300]
    found: dict[str, float] = {}
    for line in body.decode().splitlines():
        match = _GAUGE_RE.match(line)
        if match and match.group(1) in GAUGES:
            found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(2))
    assert set(found) == set(GAUGES), found
    return found


def wait_for_idle_gauges(server: LiveDaphne, within: float) -> float:
    """Seconds until every gauge reads 0; fails with the last reading after `within` seconds."""
    start = time.monotonic()
    while True:
        reading = gauges(server)
        elapsed = time.monotonic() - start
        if all(value == 0 for value in reading.values()):
            return elapsed
        assert elapsed < within, f"gauges still {reading} after {elapsed:.1f}s"
        time.sleep(0.1)
