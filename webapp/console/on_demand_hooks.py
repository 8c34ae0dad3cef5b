"""What webapp.serving.on_demand needs of the console: how a registered model is sized, and how its load
starts on every replica. Installed at start (webapp.console.apps)."""

from __future__ import annotations

from inference.api import ModelInfo


def estimate(info: ModelInfo) -> tuple[int, int] | None:
    """(bytes needed, bytes free on the device now), or None for a model whose files are not here."""
    # Function-local: sizing reads the model's files and probes the device (torch).
    from inference.manager.footprint import estimate as footprint_estimate
    from inference.manager.footprint import probe_device, read_shape
    from webapp.console.registry import engine_config_for
    from webapp.core.engine_settings import engine_settings_get
    from webapp.core.models import ModelRegistration
    from webapp.serving.memory_check import model_files

    row = ModelRegistration.objects.filter(name=info.name).first()
    if row is None:
        return None
    config = engine_config_for(row, engine_settings_get())
    path = model_files(config.model) if config.engine_type == "native" else None
    if path is None:
        return None
    facts = probe_device(config.device, config.cpu_kernels())
    footprint = footprint_estimate(info.name, info.name, config, read_shape(path), facts)
    return footprint.needed_bytes, facts.available_bytes


def start(name: str) -> None:
    """The console's Load, as if an administrator pressed it: saved for every replica and announced."""
    from webapp.console.lifecycle import model_load

    model_load(name=name)
