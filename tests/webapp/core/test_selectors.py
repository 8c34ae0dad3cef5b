"""Core reads: the defaults layering the API and chat share, and the engine-settings row."""

from __future__ import annotations

from typing import Any

import pytest

from webapp.core.engine_settings import engine_settings_get, log_prompts_enabled
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.core.selectors import model_defaults

pytestmark = pytest.mark.database


def test_model_defaults_for_name_or_alias(db: None) -> None:
    assert model_defaults("nothing") == {"sampling": {}, "system_prompt": ""}
    ModelRegistration.objects.create(
        name="m", source="default", aliases=["alias"], sampling_defaults={"top_p": 0.5}, system_prompt="Hi."
    )
    assert model_defaults("alias") == {"sampling": {"top_p": 0.5}, "system_prompt": "Hi."}
    assert not EngineSettings.objects.exists()  # reading never creates the settings row
    EngineSettings.objects.create(default_temperature=0.2, default_top_p=0.9)
    assert model_defaults("m")["sampling"] == {"temperature": 0.2, "top_p": 0.5}
    assert model_defaults("nothing") == {"sampling": {"temperature": 0.2, "top_p": 0.9}, "system_prompt": ""}


def test_engine_settings_get_is_a_read(db: None, settings: Any) -> None:
    settings.MOONCAKE_DRAIN_TIMEOUT = 12
    settings.MOONCAKE_API_LOG_PROMPTS = True
    row = engine_settings_get()
    assert row.pk is None and not EngineSettings.objects.exists()
    # No override on the row: the drain timeout follows the configured one (test_engine_settings.py).
    assert row.drain_timeout_seconds is None and log_prompts_enabled()
    EngineSettings.objects.create(log_prompts=False)
    assert engine_settings_get().pk is not None and not log_prompts_enabled()
