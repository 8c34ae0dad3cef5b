"""Each model's EngineConfig from its layers: default < env < yaml < console, every field with its source."""

from __future__ import annotations

from typing import Any

import pytest

from webapp.console.registry import engine_config_for
from webapp.core.config import Sourced, resolve_settings
from webapp.core.engine_config import console_layer, resolve_engine
from webapp.core.engine_settings import resolve_registered_engine
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.serving.engine import engine_config_dict, resolve_builtin_engine


def _env(**values: str) -> dict[str, Sourced]:
    return {
        key: Sourced(value=value, source="env", origin=f"MOONCAKE_{key.upper()}")
        for key, value in values.items()
    }


def test_later_layers_win_and_say_so() -> None:
    yaml = {"max_num_seqs": Sourced(value=8, source="yaml", origin="engine.max_num_seqs")}
    resolved = resolve_engine(
        [_env(cpu_threads="2", max_num_seqs="4"), yaml, console_layer({"block_size": 32}, "tuning page")]
    )
    assert (resolved.config.cpu_threads, resolved.config.max_num_seqs, resolved.config.block_size) == (
        2,
        8,
        32,
    )
    sources = {name: sourced.describe() for name, sourced in resolved.sources.items()}
    assert sources["cpu_threads"] == "env (MOONCAKE_CPU_THREADS)"
    assert sources["max_num_seqs"] == "yaml (engine.max_num_seqs)"
    assert sources["block_size"] == "console (tuning page)"
    assert sources["seed"] == "default" and resolved.sources["seed"].value == 0
    assert resolved.sources["cpu_threads"].value == 2  # the coerced value, not the variable's text


def test_yaml_alias_and_bad_values() -> None:
    resolved = resolve_engine(
        [{"model_id": Sourced(value="/m/x.gguf", source="yaml", origin="model.model_id")}]
    )
    assert resolved.config.model == "/m/x.gguf" and resolved.sources["model"].origin == "model.model_id"
    with pytest.raises(ValueError, match="max_num_seqs"):
        resolve_engine([console_layer({"max_num_seqs": 0}, "tuning page")])


def test_builtin_model_from_settings(settings: Any, tmp_path: Any) -> None:
    settings.MOONCAKE_SETTINGS = resolve_settings(
        {"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_Q4_AMX": "1"}, base_dir=tmp_path, cwd=tmp_path
    )
    settings.MOONCAKE = {
        "server": {},
        "model": {"model_id": "default", "dtype": "auto", "max_model_len": 512},
        "engine": {"type": "native"},
    }
    resolved = resolve_builtin_engine(settings.MOONCAKE)
    # The variable's old name, still read.
    assert resolved.config.gguf_amx_decode is True
    assert resolved.sources["gguf_amx_decode"].origin == "MOONCAKE_Q4_AMX"
    # Keys settings.MOONCAKE fills from the yaml defaults are defaults; the rest come from the file.
    assert resolved.sources["dtype"].source == "default"
    assert resolved.sources["max_model_len"].describe() == "yaml (model.max_model_len)"
    assert resolved.sources["cache_dir"].value == str(settings.CACHE_DIR)
    assert engine_config_dict(settings.MOONCAKE)["max_model_len"] == 512


def test_registered_model_applies_tuning_then_its_own_row(db: None, settings: Any) -> None:
    settings.MOONCAKE = {
        **settings.MOONCAKE,
        "engine": {"type": "native", "max_num_seqs": 8, "block_size": 32},
    }
    row = ModelRegistration.objects.create(name="m", source="default", dtype="float32", max_model_len=256)
    tuning = EngineSettings.objects.create(max_num_seqs=4)
    resolved = resolve_registered_engine(row, tuning)
    assert resolved.config == engine_config_for(row, tuning)
    assert (resolved.config.max_num_seqs, resolved.config.block_size) == (4, 32)
    assert resolved.sources["max_num_seqs"].describe() == "console (tuning page)"
    assert resolved.sources["block_size"].describe() == "yaml (engine.block_size)"
    assert resolved.sources["dtype"].describe() == "console (Models page: m)"
    assert resolved.sources["max_model_len"].value == 256
    assert resolved.config.model_roots == tuple(str(root) for root in settings.MODEL_ROOTS)
