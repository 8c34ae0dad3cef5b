"""start(config, host): the front-end `engine.type` names, from one table.

Adding an engine type is one package under inference/frontends/ and one entry in STARTERS. Each starter
imports its front-end when called, so a server that runs only remote engines never imports the native
engine's model code, and the web layer imports no front-end at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inference.api import ManagedEngine
from inference.config import SUPERVISED_TYPES, EngineConfig


@dataclass(frozen=True, slots=True)
class EngineHost:
    """What the serving process supplies that an engine may not look up itself (it reads no environment)."""

    log_dir: Path  # where a supervised server writes its log
    # The command that starts a supervised engine's server; raises EngineNotInstalledError saying how to
    # install it when there is none.
    server_executable: Callable[[EngineConfig], str]


Starter = Callable[[EngineConfig, EngineHost], ManagedEngine]


def _native(config: EngineConfig, host: EngineHost) -> ManagedEngine:
    from inference.frontends.local.async_engine import AsyncEngine

    return AsyncEngine.start(config)


def _embedding(config: EngineConfig, host: EngineHost) -> ManagedEngine:
    from inference.frontends.embedding.engine import EmbeddingEngine

    return EmbeddingEngine.start(config)


def _transformers(config: EngineConfig, host: EngineHost) -> ManagedEngine:
    from inference.frontends.transformers.engine import TransformersEngine

    return TransformersEngine.start(config)


def _remote(config: EngineConfig, host: EngineHost) -> ManagedEngine:
    from inference.frontends.remote.engine import RemoteEngine

    return RemoteEngine.start(config)


def _supervised(config: EngineConfig, host: EngineHost) -> ManagedEngine:
    from inference.frontends.supervised.engine import SupervisedEngine

    executable = host.server_executable(config)  # first: a missing server fails before the tokenizer loads
    return SupervisedEngine.start(config, executable=executable, log_dir=host.log_dir)


STARTERS: dict[str, Starter] = {
    "native": _native,
    "transformers": _transformers,
    "openai": _remote,
    **dict.fromkeys(SUPERVISED_TYPES, _supervised),
}


def start(config: EngineConfig, host: EngineHost) -> ManagedEngine:
    """Load and start the engine config.engine_type names; it serves once this returns."""
    if config.task == "embed":  # only our encoder serves embeddings (EngineConfig checks the type)
        return _embedding(config, host)
    try:
        starter = STARTERS[config.engine_type]
    except KeyError:
        raise ValueError(f"no front-end for engine type {config.engine_type!r}") from None
    return starter(config, host)
