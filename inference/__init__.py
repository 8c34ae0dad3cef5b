"""Mooncake's inference engine: paged KV cache, continuous batching, our own model implementations.

Web code imports only the names below.
"""

from inference.async_engine import AsyncEngine, EngineHealth
from inference.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from inference.engine import LLMEngine
from inference.errors import (
    EngineDeadError,
    EngineError,
    InsufficientMemoryError,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    RequestFailedError,
    UnknownModelError,
)
from inference.manager import ModelInfo, ModelManager
from inference.metrics import EngineStats, Histogram
from inference.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from inference.sampling_params import SamplingParams

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
