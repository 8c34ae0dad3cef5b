"""The drain timeout's one rule: MOONCAKE_DRAIN_TIMEOUT / server.drain_timeout is the default, the console's
tuning row an explicit override that can be cleared back to it; every stop, unload and restart uses it."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps

from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.console.forms import TuningForm
from webapp.console.lifecycle import model_unload
from webapp.core.engine_settings import drain_timeout, engine_settings_get, server_overrides
from webapp.core.models import EngineSettings
from webapp.serving.runtime import get_runtime

migration = importlib.import_module("webapp.core.migrations.0003_drain_timeout_override")


@pytest.fixture
def configured(settings: Any) -> float:
    settings.MOONCAKE_DRAIN_TIMEOUT = 12.0
    return 12.0


@pytest.mark.database
def test_the_configured_value_until_an_admin_overrides_it(db: None, configured: float) -> None:
    assert drain_timeout() == configured and engine_settings_get().drain_timeout_seconds is None
    row = EngineSettings.objects.create(drain_timeout_seconds=5)
    assert drain_timeout() == drain_timeout(row) == 5.0
    assert server_overrides(row)["drain_timeout"] == 5.0
    row.drain_timeout_seconds = None  # cleared on the tuning page
    row.save()
    assert drain_timeout() == configured and "drain_timeout" not in server_overrides(row)


@pytest.mark.database
def test_saving_other_tuning_fields_does_not_pin_the_default(db: None, configured: float) -> None:
    form = TuningForm(data={"evict_lru": "on"}, instance=engine_settings_get())
    assert form.is_valid(), form.errors
    form.save()
    assert EngineSettings.objects.get().drain_timeout_seconds is None
    assert drain_timeout() == configured
    placeholder = TuningForm().fields["drain_timeout_seconds"].widget.attrs["placeholder"]
    assert placeholder == "12"


def test_the_migration_clears_copies_of_the_configured_value(db: None, configured: float) -> None:
    copied = EngineSettings.objects.create(drain_timeout_seconds=12)
    chosen = EngineSettings.objects.create(drain_timeout_seconds=90)
    migration.clear_copied_default(apps, None)
    copied.refresh_from_db()
    chosen.refresh_from_db()
    assert (copied.drain_timeout_seconds, chosen.drain_timeout_seconds) == (None, 90)
    migration.restore_default(apps, None)
    copied.refresh_from_db()
    assert copied.drain_timeout_seconds == 12


@pytest.fixture
def fake_manager() -> Iterator[FakeModelManager]:
    previous = get_runtime().peek_manager()
    manager = FakeModelManager.with_engine(FakeEngine(model_name="base"))
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().jobs.wait_all()
    get_runtime().install_manager(previous)


@pytest.mark.database
def test_console_unload_drains_for_the_resolved_timeout(
    db: None, configured: float, fake_manager: FakeModelManager
) -> None:
    model_unload(name="base")
    get_runtime().jobs.wait_all()
    EngineSettings.objects.create(drain_timeout_seconds=3)
    fake_manager.load("base")
    model_unload(name="base")
    get_runtime().jobs.wait_all()
    assert fake_manager.unloads == [("base", configured), ("base", 3.0)]
