"""Saved registrations reach the manager on a server's first request, without anyone opening the console."""

from __future__ import annotations

from typing import Any

from django.core.signals import request_started
from django.test import Client

from inference import ModelManager
from webapp.console import startup
from webapp.core.models import ModelRegistration


def test_first_request_registers_saved_models(manager: ModelManager, settings: Any, db: None) -> None:
    ModelRegistration.objects.create(name="saved", source="default", aliases=["kept"])
    settings.MOONCAKE_AUTOLOAD = True
    startup._done.clear()
    startup.connect_startup_sync()
    try:
        Client().get("/version")
        assert "saved" in {i.name for i in manager.list()}
        assert startup._done.is_set()
    finally:
        request_started.disconnect(startup._sync_once, dispatch_uid="console-startup-sync")


def test_off_without_autoload(manager: ModelManager, settings: Any, db: None) -> None:
    ModelRegistration.objects.create(name="saved", source="default")
    settings.MOONCAKE_AUTOLOAD = False
    startup._done.clear()
    startup.connect_startup_sync()
    Client().get("/version")
    assert "saved" not in {i.name for i in manager.list()}
