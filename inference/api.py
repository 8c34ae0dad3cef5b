"""The engine's contract with the web layer: configuration, requests, outputs, errors, reports, Protocols.

Web code imports engine names from here only. Nothing here imports torch, directly or through what it
re-exports, so Django, commands and Celery workers load without it; what needs torch (AsyncEngine,
ModelManager) is built by webapp/serving/engine.py alone. tests/inference/test_api_contract.py holds both.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from inference.config import (
    ENGINE_TYPES,
    IN_PROCESS_TYPES,
    REMOTE_FIELDS,
    SUPERVISED_TYPES,
    EngineConfig,
    fields_read_by,
    settings_not_read,
)
from inference.config_groups import (
    ATTENTION_BACKENDS,
    CPU_ISAS,
    DEFAULT_MAX_QUEUE_LEN,
    DEVICES,
    DTYPES,
    QUANTIZATION_ALIASES,
    QUANTIZATIONS,
    TASKS,
    CacheConfig,
    CpuKernelConfig,
    ModelConfig,
    RemoteSettings,
    SchedulerConfig,
    ServerSettings,
)
from inference.embedding_client import EmbeddingClient
from inference.errors import (
    EngineDeadError,
    EngineError,
    InsufficientMemoryError,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    RequestFailedError,
    UnknownModelError,
    UnsupportedTaskError,
    UpstreamRejectedError,
    UpstreamUnavailableError,
)
from inference.metrics import EngineStats, Histogram
from inference.outputs import (
    CompletionOutput,
    FinishReason,
    Logprob,
    RequestMetrics,
    RequestOutput,
    TokenLogprobs,
)
from inference.sampling_params import (
    MAX_INT32,
    MAX_LOGIT_BIAS,
    MAX_LOGIT_BIAS_VALUE,
    MAX_LOGPROBS,
    MAX_N,
    MAX_PENALTY,
    MAX_REPETITION_PENALTY,
    MAX_STOP_STRING_CHARS,
    MAX_STOP_STRINGS,
    MAX_TEMPERATURE,
    MIN_REPETITION_PENALTY,
    SEED_RANGE,
    LogitsProcessor,
    SamplingParams,
)
from inference.status import EngineHealth, EngineState, ModelInfo, ModelState


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the web layer calls (counting, echoing, vocabulary bounds)."""

    def encode(self, text: str, *, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = ...) -> str: ...

    def __len__(self) -> int: ...


@runtime_checkable
class EngineClient(Protocol):
    """One loaded model's engine, as the web layer and the manager's reports use it.

    Implemented by every front-end (inference/frontends/) and by the web tests' FakeEngine. Read-only
    properties here so an implementation may hold them as plain attributes.
    """

    @property
    def model_name(self) -> str:
        """The model's source (the manager's name is the one clients use)."""
        ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def max_queue_len(self) -> int:
        """Requests the waiting queue can ever hold: a request needing more is refused up front."""
        ...

    @property
    def eos_token_ids(self) -> set[int]: ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def memory_bytes(self) -> int:
        """Weights plus KV cache, the figure the manager's memory budget counts."""
        ...

    @property
    def kv_capacity_tokens(self) -> int: ...

    @property
    def model_details(self) -> dict[str, Any]:
        """architecture, num_params, dtype and size_on_disk, as ModelInfo shows them."""
        ...

    def expect(self) -> AbstractContextManager[object]:
        """Held while a request is prepared, so an idle engine lets a burst gather before its first step."""
        ...

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Token ids of messages under the model's chat template: blocking CPU work, thread-safe, so
        async callers run it off the event loop (asyncio.to_thread)."""
        ...

    def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[RequestOutput, None]:
        """Stream outputs. Admission errors are raised by the first anext(); aclose() before the last
        output aborts the request."""
        ...

    async def abort(self, request_id: str) -> None: ...

    def health(self) -> EngineHealth: ...

    def stats(self) -> EngineStats: ...


class ManagedEngine(EngineClient, Protocol):
    """A front-end as the model manager drives it; every engine type implements it (inference/frontends/)."""

    def set_on_death(self, callback: Callable[[Any], None]) -> None:
        """Called (once, from the engine's side) when the engine can no longer serve."""
        ...

    def shutdown(self, *, drain_timeout: float = 0.0) -> None: ...

    def stop_accepting(self) -> None:
        """A restart's first step: new requests are refused, requests in flight go on."""
        ...

    def take_unstarted(self) -> builtins.list[Any]:
        """Requests that never started, removed from this engine with their callers' streams."""
        ...

    def adopt(self, submission: Any) -> None:
        """Run a request another engine of this type gave up (take_unstarted), on its caller's stream."""
        ...


class ModelManagerClient(Protocol):
    """The model registry the web layer drives (inference.manager.model_manager.ModelManager). Thread-safe;
    load, unload and reconfigure block, so async code calls them via asyncio.to_thread."""

    default_name: str | None
    memory_budget_bytes: int | None
    evict_lru: bool

    def register(
        self,
        name: str,
        config: EngineConfig,
        *,
        aliases: builtins.list[str] | None = None,
        keep_alive_seconds: float | None = None,
    ) -> ModelInfo: ...

    def unregister(self, name: str) -> None: ...

    def set_default(self, name: str) -> None: ...

    def list(self) -> builtins.list[ModelInfo]: ...

    def reconfigure(
        self,
        name: str,
        config: EngineConfig,
        *,
        aliases: builtins.list[str] | None = None,
        keep_alive_seconds: float | None = None,
        drain_timeout: float = 0.0,
    ) -> None: ...

    def load(self, name: str) -> EngineClient: ...

    def unload(self, name: str, *, drain_timeout: float = 0.0) -> None: ...

    def get(self, name: str | None = None) -> EngineClient:
        """The loaded engine (None: the default's); counts as use for LRU and keep-alive."""
        ...

    def peek(self, name: str | None = None) -> EngineClient:
        """Like get(), without counting as use: health probes, metrics and dashboards."""
        ...

    def reap_idle(self, now: float | None = None) -> builtins.list[str]: ...


__all__ = [
    "ATTENTION_BACKENDS",
    "CPU_ISAS",
    "DEFAULT_MAX_QUEUE_LEN",
    "DEVICES",
    "DTYPES",
    "ENGINE_TYPES",
    "IN_PROCESS_TYPES",
    "MAX_INT32",
    "MAX_LOGIT_BIAS",
    "MAX_LOGIT_BIAS_VALUE",
    "MAX_LOGPROBS",
    "MAX_N",
    "MAX_PENALTY",
    "MAX_REPETITION_PENALTY",
    "MAX_STOP_STRINGS",
    "MAX_STOP_STRING_CHARS",
    "MAX_TEMPERATURE",
    "MIN_REPETITION_PENALTY",
    "QUANTIZATIONS",
    "QUANTIZATION_ALIASES",
    "REMOTE_FIELDS",
    "SEED_RANGE",
    "SUPERVISED_TYPES",
    "TASKS",
    "CacheConfig",
    "CompletionOutput",
    "CpuKernelConfig",
    "EmbeddingClient",
    "EngineClient",
    "EngineConfig",
    "EngineDeadError",
    "EngineError",
    "EngineHealth",
    "EngineState",
    "EngineStats",
    "FinishReason",
    "Histogram",
    "InsufficientMemoryError",
    "LogitsProcessor",
    "Logprob",
    "ManagedEngine",
    "ModelConfig",
    "ModelInfo",
    "ModelManagerClient",
    "ModelState",
    "NoModelLoadedError",
    "PromptTooLongError",
    "QueueFullError",
    "RemoteSettings",
    "RequestFailedError",
    "RequestMetrics",
    "RequestOutput",
    "SamplingParams",
    "SchedulerConfig",
    "ServerSettings",
    "TokenLogprobs",
    "Tokenizer",
    "UnknownModelError",
    "UnsupportedTaskError",
    "UpstreamRejectedError",
    "UpstreamUnavailableError",
    "fields_read_by",
    "settings_not_read",
]
