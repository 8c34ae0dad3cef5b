"""Tuning: validated fields with explanations; applying restarts engines with a drain; audit before/after."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inference import EngineConfig, ModelManager
from inference.api import ATTENTION_BACKENDS
from inference.models.layers.attention import BACKEND_NAMES
from tests.webapp.console.conftest import SizedFakeEngine
from webapp.console.models import AuditLog
from webapp.console.registry import engine_config_for
from webapp.console.tuning_text import TUNING_HELP
from webapp.core.engine_settings import engine_overrides, engine_settings_get
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.serving.runtime import get_runtime

VALID = {
    "max_num_seqs": "8",
    "max_num_batched_tokens": "512",
    "kv_cache_memory_bytes": "",
    "block_size": "16",
    "enable_chunked_prefill": "on",
    "enable_prefix_caching": "on",
    "attention_backend": "",
    "enforce_eager": "",
    "kv_cache_dtype": "",
    "default_temperature": "0.7",
    "default_top_p": "0.9",
    "default_max_tokens": "256",
    "drain_timeout_seconds": "5",
    "memory_budget_bytes": "",
    "evict_lru": "on",
    "log_prompts": "",
}


@pytest.mark.database
def test_every_field_is_explained(staff_client: Client, manager: ModelManager) -> None:
    html = staff_client.get(reverse("console:tuning")).content.decode()
    for name, help_text in TUNING_HELP.items():
        assert f'name="{name}"' in html
        assert help_text.replace("'", "&#x27;") in html


@pytest.mark.database
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("block_size", "24", "power of two"),
        ("max_num_seqs", "0", "max_num_seqs must be &gt; 0"),
        ("drain_timeout_seconds", "-1", "greater than or equal to"),
        ("default_temperature", "3", "at most 2.0"),
        ("default_top_p", "0", "above 0.0"),
        ("max_num_batched_tokens", "4", "must be at least max_num_seqs"),
        ("attention_backend", "magic", "Select a valid choice. magic is not one of the available choices."),
        ("enforce_eager", "maybe", "Select a valid choice. maybe is not one of the available choices."),
        ("kv_cache_dtype", "fp8", "Select a valid choice. fp8 is not one of the available choices."),
    ],
)
def test_invalid_values_are_refused(
    staff_client: Client, manager: ModelManager, field: str, value: str, message: str
) -> None:
    response = staff_client.post(reverse("console:tuning"), VALID | {field: value})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not AuditLog.objects.exists()


@pytest.mark.database
def test_apply_restarts_loaded_engines_and_audits(
    staff_client: Client, manager: ModelManager, engines: list[SizedFakeEngine]
) -> None:
    manager.load("base")
    engines[0].queued = ["queued request"]
    response = staff_client.post(reverse("console:tuning"), VALID)
    assert response.status_code == 302
    get_runtime().jobs.wait_all()
    assert engines[0].shutdown_calls == [5.0]  # drained with the new timeout
    # Through ModelManager.reconfigure: queued requests are handed over.
    assert engines[1].adopted == ["queued request"]
    assert len(engines) == 2 and engines[1].config.max_num_seqs == 8
    assert engines[1].config.max_num_batched_tokens == 512
    assert manager.default_name == "base"
    entry = AuditLog.objects.get(action="engine.tune")
    assert entry.actor is not None and entry.actor.username == "root"
    assert (entry.before or {})["max_num_seqs"] is None and (entry.after or {})["max_num_seqs"] == 8
    assert (entry.after or {})["default_temperature"] == 0.7


@pytest.mark.database
def test_non_engine_change_does_not_restart(
    staff_client: Client, manager: ModelManager, engines: list[SizedFakeEngine]
) -> None:
    manager.load("base")
    staff_client.post(reverse("console:tuning"), VALID)
    get_runtime().jobs.wait_all()
    staff_client.post(reverse("console:tuning"), VALID | {"log_prompts": "on", "evict_lru": ""})
    get_runtime().jobs.wait_all()
    assert len(engines) == 2
    assert manager.evict_lru is False
    assert EngineSettings.objects.get().log_prompts
    assert AuditLog.objects.filter(action="engine.tune").count() == 2


@pytest.mark.database
def test_unchanged_form_writes_no_audit(staff_client: Client, manager: ModelManager) -> None:
    staff_client.post(reverse("console:tuning"), VALID)
    get_runtime().jobs.wait_all()
    staff_client.post(reverse("console:tuning"), VALID)
    assert AuditLog.objects.filter(action="engine.tune").count() == 1


def test_backend_choices_are_the_engines() -> None:
    """One list: the console's choices, config validation and the attention selector all use it."""
    field = EngineSettings._meta.get_field("attention_backend")
    assert tuple(value for value, _ in field.choices) == ATTENTION_BACKENDS
    assert BACKEND_NAMES is ATTENTION_BACKENDS
    for name in BACKEND_NAMES:
        assert EngineConfig(attention_backend=name).attention_backend == name


@pytest.mark.database
def test_engine_options_offer_mooncake_yaml_value(
    staff_client: Client, manager: ModelManager, settings: Any
) -> None:
    settings.MOONCAKE = {
        **settings.MOONCAKE,
        "engine": {"attention_backend": "triton", "enforce_eager": True},
    }
    html = staff_client.get(reverse("console:tuning")).content.decode()
    assert '<option value="" selected>from mooncake.yaml (triton)</option>' in html
    assert '<option value="" selected>from mooncake.yaml (on)</option>' in html
    assert '<option value="flash_attn">flash_attn</option>' in html


@pytest.mark.database
@pytest.mark.parametrize(
    ("field", "posted", "stored", "option"),
    [
        ("attention_backend", "torch", "torch", '<option value="torch" selected>'),
        ("enforce_eager", "on", True, '<option value="on" selected>'),
        ("enforce_eager", "off", False, '<option value="off" selected>'),
        ("kv_cache_dtype", "float16", "float16", '<option value="float16" selected>'),
    ],
)
def test_engine_option_saves_audits_and_restarts(
    staff_client: Client,
    manager: ModelManager,
    engines: list[SizedFakeEngine],
    field: str,
    posted: str,
    stored: object,
    option: str,
) -> None:
    manager.load("base")
    staff_client.post(reverse("console:tuning"), VALID, follow=True)  # follow: shows its message
    get_runtime().jobs.wait_all()
    assert len(engines) == 2
    response = staff_client.post(reverse("console:tuning"), VALID | {field: posted}, follow=True)
    get_runtime().jobs.wait_all()
    assert "the engines restart" in response.content.decode()
    assert getattr(EngineSettings.objects.get(), field) == stored
    entry = AuditLog.objects.filter(action="engine.tune").first()
    assert entry is not None
    assert (entry.before or {})[field] is None and (entry.after or {})[field] == stored
    assert len(engines) == 3 and getattr(engines[2].config, field) == stored
    assert option in response.content.decode()  # the page shows the saved choice


@pytest.mark.database
def test_blank_engine_options_keep_mooncake_yaml(
    staff_client: Client, manager: ModelManager, settings: Any
) -> None:
    settings.MOONCAKE = {
        **settings.MOONCAKE,
        "engine": {"attention_backend": "triton", "enforce_eager": True},
    }
    staff_client.post(reverse("console:tuning"), VALID)
    row = EngineSettings.objects.get()
    assert row.attention_backend is None and row.enforce_eager is None
    overrides = engine_overrides(row)
    assert "attention_backend" not in overrides and "enforce_eager" not in overrides
    config = engine_config_for(ModelRegistration(name="m", source="default"), row)
    assert config.attention_backend == "triton" and config.enforce_eager is True


@pytest.mark.database
def test_set_engine_options_override_mooncake_yaml(db: None, settings: Any) -> None:
    settings.MOONCAKE = {
        **settings.MOONCAKE,
        "engine": {"attention_backend": "triton", "enforce_eager": True},
    }
    row = engine_settings_get()
    row.attention_backend = "torch"
    row.enforce_eager = False  # off is a setting too, not "unset"
    row.save()
    overrides = engine_overrides(row)
    assert overrides["attention_backend"] == "torch" and overrides["enforce_eager"] is False
    config = EngineConfig(model="default", **overrides)
    assert config.attention_backend == "torch" and config.enforce_eager is False
    config = engine_config_for(ModelRegistration(name="m", source="default"), row)
    assert config.attention_backend == "torch" and config.enforce_eager is False
    row.enforce_eager = True
    assert EngineConfig(model="default", **engine_overrides(row)).enforce_eager is True
