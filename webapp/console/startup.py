"""At server start: register the console's saved models into the manager, before the default model loads,
make the saved default the default, and start following the other replicas (console.replication)."""

from __future__ import annotations

from webapp.serving.runtime import register_start_hook


def take_up_saved_models() -> None:
    """Register the saved models and take the saved default (the sync's later passes do the rest)."""
    # The registry imports models: after the apps are ready.
    from webapp.console.registry import sync_manager
    from webapp.console.replication import model_sync
    from webapp.core.models import ModelRegistration

    manager = sync_manager()
    rows = list(ModelRegistration.objects.all())
    model_sync().seen = {row.name for row in rows}
    known = {info.name for info in manager.list()}
    default = next((row.name for row in rows if row.is_default and row.name in known), None)
    if default is not None:
        manager.set_default(default)


def prepare_model_root() -> None:
    """A new install has no models folder (uploads and imports go there); an old one may hold uploads
    abandoned while the server was down."""
    from webapp.console.model_files import ensure_model_root
    from webapp.console.uploads import uploads_prune

    ensure_model_root()
    uploads_prune()


def register_saved_models() -> None:
    from webapp.console.reconcile import reconcile
    from webapp.console.replication import model_sync

    prepare_model_root()
    take_up_saved_models()
    model_sync().start(reconcile)


def connect_startup_sync() -> None:
    register_start_hook(register_saved_models)
