"""The composition root: the one web module that constructs the engine side, from settings.MOONCAKE.

Everything else uses the torch-free contract in `inference.api`; the engine implementation (and so torch)
is imported only when a manager is built (webapp.serving.runtime does, on first use), so management commands
and Celery workers, which never run models, start without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from inference.api import EngineClient, EngineConfig, ManagedEngine, ModelManagerClient
from webapp.core.engine_config import ResolvedEngine, base_layers, merge_layers, resolve_engine
from webapp.core.hub_models import hub_engine_factory
from webapp.core.model_list import DEFAULT_MODEL_NAME, ListedModel, listed_models, served_model_name
from webapp.serving.engine_servers import server_executable

__all__ = ["DEFAULT_MODEL_NAME", "build_manager", "resolve_builtin_engine", "served_model_name"]


def engine_config_dict(
    mooncake: dict[str, dict[str, Any]], listed: ListedModel | None = None
) -> dict[str, Any]:
    """Defaults, the environment's engine settings and the yaml `model` and `engine` sections (and
    `listed`'s entry), merged as `EngineConfig.from_dict` takes them (webapp.core.engine_config resolves
    them, sources and all)."""
    layers = base_layers(mooncake, listed=listed)
    return {key: sourced.value for key, sourced in merge_layers(layers).items()}


def resolve_builtin_engine(
    mooncake: dict[str, dict[str, Any]], listed: ListedModel | None = None
) -> ResolvedEngine:
    """A model mooncake.yaml serves (the first listed, unless `listed` says which), as the server registers
    it at start (no console layer yet)."""
    return resolve_engine(base_layers(mooncake, listed=listed or listed_models(mooncake)[0]))


def build_engine_config(mooncake: dict[str, dict[str, Any]]) -> EngineConfig:
    return resolve_builtin_engine(mooncake).config


def start_engine(config: EngineConfig) -> ManagedEngine:
    """The engine `engine.type` names (inference.frontends.registry), with what only this process knows:
    where a supervised server's command is (or how to install it) and where its log goes."""
    # Function-local on purpose: this is where the web app builds the engine side (torch); see the docstring.
    from inference.frontends.registry import EngineHost, start

    return start(
        config, EngineHost(log_dir=settings.DATA_DIR / "engines", server_executable=server_executable)
    )


def build_manager(*, on_loaded: Callable[[EngineClient], None]) -> ModelManagerClient:
    """The manager with mooncake.yaml's models registered, in order, and its default model the default
    (the console's come at start). The default also answers to "default"."""
    from inference.manager.model_manager import ModelManager  # function-local: see start_engine

    budget = settings.MOONCAKE_MEMORY_BUDGET_BYTES or None
    # A hub id is fetched inside the load (the model reads "downloading"), so the server starts at once.
    factory = hub_engine_factory(start_engine, on_progress=lambda *report: manager.report_download(*report))
    manager = ModelManager(memory_budget_bytes=budget, on_loaded=on_loaded, engine_factory=factory)
    mooncake = settings.MOONCAKE
    listed = listed_models(mooncake)
    names = {n for model in listed for n in (model.name, *model.aliases)}
    for model in listed:
        aliases = list(model.aliases)
        if model.default and "default" not in names:
            aliases.append("default")
        manager.register(model.name, resolve_builtin_engine(mooncake, model).config, aliases=aliases)
    manager.set_default(next(model.name for model in listed if model.default))
    return manager
