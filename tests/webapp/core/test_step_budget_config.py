"""mooncake.yaml's `engine.max_step_latency_ms` reaches the scheduler (and `null` turns it off)."""

from __future__ import annotations

from pathlib import Path

from webapp.core.config import load_mooncake_config
from webapp.serving.engine import build_engine_config


def test_max_step_latency_ms_flows_from_yaml_to_the_scheduler_config(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.yaml"
    path.write_text("engine:\n  max_step_latency_ms: 120\n")
    config = build_engine_config(load_mooncake_config(path))
    assert config.max_step_latency_ms == 120.0
    assert config.scheduler_config(1024).max_step_latency_ms == 120.0
    path.write_text("engine:\n  max_step_latency_ms: null\n")
    assert build_engine_config(load_mooncake_config(path)).max_step_latency_ms is None
    assert build_engine_config(load_mooncake_config(None)).max_step_latency_ms == 100.0  # the default
