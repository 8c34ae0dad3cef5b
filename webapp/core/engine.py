"""The composition root: the one web module that constructs the engine side, from settings.MOONCAKE.

Everything else uses the torch-free contract in `inference.api`; the engine implementation (and so torch)
is imported only when a manager is built (webapp.core.runtime does, on first use), so management commands
and Celery workers, which never run models, start without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings

from inference.api import EngineClient, EngineConfig, ModelManagerClient
from webapp.core.engine_config import ResolvedEngine, base_layers, merge_layers, resolve_engine

if TYPE_CHECKING:
    from inference.async_engine import AsyncEngine

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def engine_config_dict(mooncake: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Defaults, the environment's engine settings and the yaml `model` and `engine` sections, merged as
    `EngineConfig.from_dict` takes them (webapp.core.engine_config resolves them, sources and all)."""
    return {key: sourced.value for key, sourced in merge_layers(base_layers(mooncake)).items()}


def resolve_builtin_engine(mooncake: dict[str, dict[str, Any]]) -> ResolvedEngine:
    """The model mooncake.yaml serves, as the server registers it at start (no console layer yet)."""
    return resolve_engine(base_layers(mooncake))


def build_engine_config(mooncake: dict[str, dict[str, Any]]) -> EngineConfig:
    return resolve_builtin_engine(mooncake).config


def served_model_name(mooncake: dict[str, dict[str, Any]]) -> str:
    """The name API clients use: `model.name`, else derived from the model's source."""
    model = mooncake.get("model", {})
    explicit = model.get("name")
    if explicit:
        return str(explicit)
    source = str(model.get("model_id") or model.get("model") or "default")
    if source == "default":
        return DEFAULT_MODEL_NAME
    path = Path(source)
    return path.stem if path.suffix == ".gguf" else path.name or source


def start_engine(config: EngineConfig) -> AsyncEngine:
    """The engine `engine.type` names: ours in this process, or a remote OpenAI-compatible server."""
    # Function-local on purpose: this is where the web app builds the engine side (torch); see the docstring.
    from inference.async_engine import AsyncEngine
    from inference.remote_engine import RemoteEngine

    if config.engine_type == "openai":
        # The manager is typed by the native engine; RemoteEngine offers all it calls on one (shutdown,
        # stats, set_on_death and the restart primitives).
        return cast("AsyncEngine", RemoteEngine.start(config))
    return AsyncEngine.start(config)


def build_manager(*, on_loaded: Callable[[EngineClient], None]) -> ModelManagerClient:
    """The manager with mooncake.yaml's model registered as the default (the console's come at start)."""
    from inference.manager import ModelManager  # function-local: see start_engine

    budget = settings.MOONCAKE_MEMORY_BUDGET_BYTES or None
    manager = ModelManager(memory_budget_bytes=budget, on_loaded=on_loaded, engine_factory=start_engine)
    mooncake = settings.MOONCAKE
    name = served_model_name(mooncake)
    aliases = [str(a) for a in mooncake.get("model", {}).get("aliases", [])]
    if name != "default" and "default" not in aliases:
        aliases.append("default")
    manager.register(name, build_engine_config(mooncake), aliases=aliases)
    manager.set_default(name)
    return manager
