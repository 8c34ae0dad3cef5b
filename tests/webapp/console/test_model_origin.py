"""The models table's origin badge (issue #47): "from mooncake.yaml" only where that file exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference import ModelManager
from webapp.console.selectors import BUILTIN_ORIGIN, YAML_ORIGIN, model_rows
from webapp.core.models import ModelRegistration


def origins() -> dict[str, str]:
    return {row.info.name: row.origin for row in model_rows()}


def test_the_bundled_default_without_a_yaml_is_built_in(
    db: None, manager: ModelManager, settings: Any
) -> None:
    settings.MOONCAKE_CONFIG_PATH = None
    ModelRegistration.objects.create(name="base", source="default", builtin=True)
    ModelRegistration.objects.create(name="mine", source="/models/mine.gguf")
    assert origins() == {"base": BUILTIN_ORIGIN, "mine": ""}
    row = next(r for r in model_rows() if r.info.name == "base")
    assert "no mooncake.yaml" in row.origin_title


def test_a_yaml_model_says_so(db: None, manager: ModelManager, settings: Any, tmp_path: Path) -> None:
    config = tmp_path / "mooncake.yaml"
    config.write_text("model: {model_id: default}\n", encoding="utf-8")
    settings.MOONCAKE_CONFIG_PATH = config
    ModelRegistration.objects.create(name="base", source="default", builtin=True)
    row = next(r for r in model_rows() if r.info.name == "base")
    assert row.origin == YAML_ORIGIN and str(config) in row.origin_title

    config.unlink()  # named by MOONCAKE_CONFIG but gone: nothing was read from it
    assert origins()["base"] == BUILTIN_ORIGIN
