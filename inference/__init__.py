"""Mooncake's inference engine: paged KV cache, continuous batching, our own model implementations.

Web code imports `inference.api`, the torch-free contract, only. Importing that runs this file first,
so the torch side (AsyncEngine, LLMEngine, ModelManager) loads here on first access, not at import.
"""

from __future__ import annotations

import importlib
from typing import Any

from inference.api import (
    CacheConfig,
    CompletionOutput,
    EngineConfig,
    EngineDeadError,
    EngineError,
    EngineHealth,
    EngineStats,
    Histogram,
    InsufficientMemoryError,
    Logprob,
    ModelConfig,
    ModelInfo,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    RequestFailedError,
    RequestMetrics,
    RequestOutput,
    SamplingParams,
    SchedulerConfig,
    UnknownModelError,
)

# Torch-side names -> their modules. Not imported even under TYPE_CHECKING: the contract's import graph
# must not reach torch at all, so the type checker sees these as Any through this package.
_LAZY = {
    "AsyncEngine": "inference.frontends.local.async_engine",
    "LLMEngine": "inference.core.engine",
    "ModelManager": "inference.manager.model_manager",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


__all__ = [
    "AsyncEngine",
    "CacheConfig",
    "CompletionOutput",
    "EngineConfig",
    "EngineDeadError",
    "EngineError",
    "EngineHealth",
    "EngineStats",
    "Histogram",
    "InsufficientMemoryError",
    "LLMEngine",
    "Logprob",
    "ModelConfig",
    "ModelInfo",
    "ModelManager",
    "NoModelLoadedError",
    "PromptTooLongError",
    "QueueFullError",
    "RequestFailedError",
    "RequestMetrics",
    "RequestOutput",
    "SamplingParams",
    "SchedulerConfig",
    "UnknownModelError",
]
