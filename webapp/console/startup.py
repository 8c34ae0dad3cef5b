"""At server start, register the console's saved models into the manager, before the default model loads."""

from __future__ import annotations

from webapp.core.runtime import register_start_hook


def register_saved_models() -> None:
    from webapp.console.registry import sync_manager  # the registry imports models: after apps are ready

    sync_manager()


def connect_startup_sync() -> None:
    register_start_hook(register_saved_models)
