"""The memory plan `mooncake check` and the start run: a max_model_len the load would refuse is a problem."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from inference.api import ModelManagerClient
from tests.webapp.serving.hub_cache import ELEMENTS, REPO, hub_snapshot
from webapp.core.config import resolve_settings
from webapp.serving.memory_check import model_files, over_budget, plan_listed, unsized


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


def _yaml(tmp_path: Path, model: dict[str, object]) -> dict[str, Any]:
    path = tmp_path / "mooncake.yaml"
    path.write_text(yaml.safe_dump({"model": model}), encoding="utf-8")
    return resolve_settings({"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_CONFIG": str(path)}, cwd=tmp_path).yaml


def test_a_cached_hub_model_is_sized_from_its_snapshot(hf_home: Path, tmp_path: Path) -> None:
    snapshot = hub_snapshot(hf_home)
    assert model_files(REPO) == snapshot
    # float32: 64,000 x 4 bytes of weights; 2 x 2 layers x 2 KV heads x 16 x 4 = 512 bytes a token.
    mooncake = _yaml(tmp_path, {"model_id": REPO, "dtype": "float32", "kv_cache_memory_bytes": 128 * 512})
    assert plan_listed(mooncake, budget_bytes=10**9).fits == [REPO]
    plan = plan_listed(mooncake, budget_bytes=300_000)
    assert plan.fits == [] and REPO in plan.problems
    assert plan.problems[REPO].startswith(f"{REPO} (model) does not fit")
    assert plan.problems[REPO].endswith(
        "budget (MOONCAKE_MEMORY_BUDGET_BYTES or the console's tuning page) to "
        f"{ELEMENTS * 4 + 128 * 512} bytes or more."
    )
    assert unsized(mooncake) == {}
    # What the load would refuse is known from the cached config too.
    too_long = _yaml(tmp_path, {"model_id": REPO, "max_model_len": 4096})
    assert "exceeds the model's context length 128" in plan_listed(too_long, budget_bytes=None).problems[REPO]


def test_a_hub_model_not_cached_is_named_as_unsized_never_fetched(hf_home: Path, tmp_path: Path) -> None:
    mooncake = _yaml(tmp_path, {"model_id": REPO})
    assert model_files(REPO) is None
    assert plan_listed(mooncake, budget_bytes=1).problems == {}  # not planned: its size is unknown
    assert unsized(mooncake) == {
        REPO: f"{REPO}: size unknown until downloaded ({REPO} is not in the Hugging Face cache); "
        "the memory budget is checked when it loads"
    }
    assert not (hf_home / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots").exists()


def test_the_start_skips_a_cached_hub_model_over_budget_and_says_which_it_cannot_size(
    hf_home: Path, tmp_path: Path, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A models list at start with a budget: a cached hub model that does not fit is not loaded, with the
    plan's reason (not a generic refusal from its load); one not cached is loaded, and the log says why
    it was not planned."""
    hub_snapshot(hf_home)
    models = [
        {"id": "cached", "model_id": REPO, "dtype": "float32"},
        {"id": "later", "model_id": "org/absent"},
    ]
    settings.MOONCAKE = _yaml(tmp_path, {"models": models})
    manager = cast(ModelManagerClient, SimpleNamespace(memory_budget_bytes=100_000))
    with caplog.at_level(logging.WARNING, logger="webapp.serving.memory_check"):
        assert over_budget(manager, {"cached", "later"}) == {"cached"}
    assert "Not loading at start: cached (model.models[0]) does not fit" in caplog.text
    assert (
        "Not planned against the memory budget: later: size unknown until downloaded (org/absent is not in "
        "the Hugging Face cache)" in caplog.text
    )
