"""The memory plan `mooncake check` and the start run: a max_model_len the load would refuse is a problem."""

from __future__ import annotations

from pathlib import Path

import yaml

from webapp.core.config import resolve_settings
from webapp.serving.memory_check import plan_listed


def test_a_max_model_len_over_the_models_context_is_named_before_any_load(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.yaml"
    models = [
        {"id": "too-long", "model_id": "default", "max_model_len": 100_000},
        {"id": "fine", "model_id": "default", "max_model_len": 4096},
        # float32: 2 x 30 layers x 3 KV heads x 64 x 4 bytes = 46,080 bytes a token; ten 16-token blocks.
        {"id": "small-cache", "model_id": "default", "max_model_len": 4096, "dtype": "float32",
         "kv_cache_memory_bytes": 10 * 16 * 46_080},
    ]  # fmt: skip
    path.write_text(yaml.safe_dump({"model": {"models": models}}), encoding="utf-8")
    resolved = resolve_settings({"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_CONFIG": str(path)}, cwd=tmp_path)
    plan = plan_listed(resolved.yaml, budget_bytes=10**12)
    # The bundled SmolLM2's GGUF says 8192 tokens of context, as its load would.
    assert plan.problems == {
        "too-long": "too-long: max_model_len=100000 exceeds the model's context length 8192; lower it, or "
        "leave it out to use the model's own",
        # The load's own words: both ways out.
        "small-cache": "small-cache: max_model_len=4096 needs 180.0 MiB of KV cache, but "
        "kv_cache_memory_bytes=7372800 leaves 7.0 MiB, enough for 160 tokens. The largest max_model_len "
        "that fits is 160; lower max_model_len to that or set kv_cache_memory_bytes to at least 188743680.",
    }
    assert plan.fits == ["fine"]
