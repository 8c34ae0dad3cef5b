"""mooncake.yaml's `speculative` mapping reaches each model's EngineConfig, a bad one is refused naming the
key, and `mooncake check` shows it with its source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inference.speculative_config import SpeculativeConfig
from webapp.core.config import resolve_settings
from webapp.core.model_list import listed_models
from webapp.serving.config_report import config_report
from webapp.serving.engine import resolve_builtin_engine

LISTED = """
model:
  models:
    - id: fast
      model_id: default
      speculative: {method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 3}
    - {id: plain, model_id: default}
"""


def _use(settings: Any, tmp_path: Path, yaml_text: str) -> None:
    (tmp_path / "mooncake.yaml").write_text(yaml_text)
    resolved = resolve_settings({"MOONCAKE_DATA": str(tmp_path / "data")}, base_dir=tmp_path, cwd=tmp_path)
    settings.MOONCAKE_SETTINGS = resolved
    settings.MOONCAKE = resolved.yaml


@pytest.mark.database
def test_per_model_setting_and_check_report(db: None, settings: Any, tmp_path: Path) -> None:
    _use(settings, tmp_path, LISTED)

    fast, plain = listed_models(settings.MOONCAKE)
    resolved = resolve_builtin_engine(settings.MOONCAKE, fast)
    assert resolved.config.speculative == SpeculativeConfig("ngram", 3, 3, 2)
    assert resolved.sources["speculative"].describe() == "yaml (model.models[0].speculative)"
    assert resolve_builtin_engine(settings.MOONCAKE, plain).config.speculative is None
    lines = config_report().lines
    rows = [line for line in lines if line.split()[:1] == ["speculative"]]
    assert "ngram: 3 tokens from 2..3-gram matches" in rows[0] and "model.models[0].speculative" in rows[0]
    assert rows[1].split()[1:3] == ["(none)", "default"]


def test_a_bad_mapping_names_the_key(db: None, settings: Any, tmp_path: Path) -> None:
    _use(settings, tmp_path, "model: {model_id: default, speculative: {method: medusa}}\n")
    with pytest.raises(ValueError, match=r"speculative\.method must be one of"):
        resolve_builtin_engine(settings.MOONCAKE)
