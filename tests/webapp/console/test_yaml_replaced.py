"""mooncake.yaml's models replaced (the default SmolLM2 by a list naming others), then a restart: the
console's record of the model the yaml no longer lists is dropped, not re-registered at every sync pass
with its old alias "default" (now the new default's); a console model whose alias clashes is logged once."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inference import EngineConfig, ModelManager
from webapp.console.registry import sync_manager
from webapp.core.models import ModelRegistration

pytestmark = pytest.mark.database

OLD = "SmolLM2-135M-Instruct"


@pytest.fixture
def replaced_yaml(db: None, settings: Any, manager: ModelManager) -> None:
    """The new yaml's models as the server registers them at start ("base" stands for smollm2, the
    default, and answers to "default"), and the record the old yaml's model left behind."""
    entries = [
        {"id": "base", "model_id": "default"},
        {"id": "all-minilm-l6-v2", "model_id": "default-embedding", "task": "embed"},
    ]
    settings.MOONCAKE = {**settings.MOONCAKE, "model": {"models": entries}}
    manager.register("all-minilm-l6-v2", EngineConfig(model="default-embedding", task="embed"))
    ModelRegistration.objects.create(
        name=OLD, source="default", aliases=["default"], builtin=True, is_default=True
    )


def test_the_record_of_a_model_the_yaml_no_longer_lists_is_dropped(
    replaced_yaml: None, staff_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="webapp.console.registry"):
        sync_manager()
        sync_manager()  # the next pass finds nothing to do
    assert set(ModelRegistration.objects.values_list("name", flat=True)) == {"base", "all-minilm-l6-v2"}
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    dropped = [r.getMessage() for r in caplog.records if OLD in r.getMessage()]
    assert len(dropped) == 1 and "no longer lists" in dropped[0]
    assert f'data-model="{OLD}"' not in staff_client.get(reverse("console:models")).content.decode()


def test_a_clashing_alias_is_logged_once_not_at_every_sync(
    replaced_yaml: None, caplog: pytest.LogCaptureFixture
) -> None:
    ModelRegistration.objects.create(name="mine", source="default", aliases=["default"])
    with caplog.at_level(logging.INFO, logger="webapp.console.registry"):
        for _ in range(3):  # as the replica sync does every few seconds
            sync_manager()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].exc_info is None
    assert "mine" in errors[0].getMessage() and "'default'" in errors[0].getMessage()
    assert ModelRegistration.objects.filter(name="mine").exists()  # an admin's row is kept, to rename
