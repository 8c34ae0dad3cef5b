"""Engine configuration: one flat EngineConfig (what users write) split into validated groups.

Over 300 lines: every setting of every engine type is one flat dataclass users write, and its checks sit
beside it so each error names the setting.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inference.speculative_config import SpeculativeConfig

# The choice lists, defined once: validation here, the attention selector and the console's forms use them.
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
ATTENTION_BACKENDS = ("auto", "torch", "triton", "flash_attn")
QUANTIZATIONS = ("none", "gguf")
# Who runs the model: "native" is our engine in this process; "transformers" transformers' own
# continuous batching in this process, for architectures ours lacks (inference.frontends.transformers.engine);
# "openai" an existing server that speaks the OpenAI API (vLLM, SGLang, TGI, llama-server, Ollama)
# at base_url (inference.frontends.remote.engine);
# "vllm", "sglang", "tgi" that engine's own server, started here as a supervised child process and then
# reached as "openai" reaches one (inference.frontends.supervised.engine).
SUPERVISED_TYPES = ("vllm", "sglang", "tgi")
IN_PROCESS_TYPES = ("native", "transformers")
ENGINE_TYPES = (*IN_PROCESS_TYPES, "openai", *SUPERVISED_TYPES)
# EngineConfig fields that only a supervised type reads (the server Mooncake starts).
SERVER_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "executable", "startup_timeout")
# Keys of the mooncake.yaml `model`/`engine` sections that belong to other layers.
_IGNORED_KEYS = frozenset({"name", "aliases", "keep_alive", "keep_alive_seconds"})
_ALIASES = {"model_id": "model", "type": "engine_type"}
# EngineConfig fields that only a remote engine (`openai` or a supervised type) reads.
REMOTE_FIELDS = ("base_url", "api_key", "upstream_model", "request_timeout", *SERVER_FIELDS)


# What each engine type reads. Every type reads the common settings; the rest are one type's own (a
# supervised server gets its settings as flags: inference.frontends.supervised.process). `mooncake check`
# refuses a setting written for a model whose type never reads it (settings_not_read).
_COMMON_FIELDS = ("model", "engine_type", "max_model_len", "max_queue_len", "model_roots", "cache_dir")
_TRANSFORMERS_FIELDS = (
    *_COMMON_FIELDS,
    *("dtype", "device", "seed", "cpu_threads", "kv_cache_memory_bytes", "gpu_memory_utilization"),
    *("max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching"),
)
_OPENAI_FIELDS = (*_COMMON_FIELDS, "base_url", "api_key", "upstream_model", "request_timeout")
_SERVER_READS = ("upstream_model", "request_timeout", "dtype", "gpu_memory_utilization", "max_num_seqs")


def fields_read_by(engine_type: str) -> frozenset[str]:
    """The EngineConfig fields an engine of this type reads."""
    if engine_type == "transformers":
        return frozenset(_TRANSFORMERS_FIELDS)
    if engine_type == "openai":
        return frozenset(_OPENAI_FIELDS)
    if engine_type in SUPERVISED_TYPES:
        return frozenset((*_COMMON_FIELDS, *_SERVER_READS, *SERVER_FIELDS))
    return frozenset(f.name for f in dataclasses.fields(EngineConfig)) - frozenset(REMOTE_FIELDS)


def settings_not_read(config: EngineConfig, given: Iterable[str]) -> list[str]:
    """Of the settings `given` for this model, those set to other than the default that its engine type
    never reads: they would show in `mooncake check` as in force and change nothing."""
    read = fields_read_by(config.engine_type)
    defaults = EngineConfig()
    return sorted(
        name for name in given if name not in read and getattr(config, name) != getattr(defaults, name, None)
    )


# Defaults other layers size themselves by (the API refuses a request the queue could never hold).
DEFAULT_MAX_QUEUE_LEN = 256


def check_positive(name: str, value: int | float) -> None:
    """The one positivity rule: EngineConfig, its groups and the model runner all apply it."""
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_memory_fraction(value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {value}")


def _off_or_positive(name: str, value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{name} must be > 0, or 0 / None for off, got {value!r}")


@dataclass(slots=True)
class ModelConfig:
    source: str
    dtype: str = "auto"
    device: str = "auto"
    max_model_len: int | None = None
    attention_backend: str = "auto"
    seed: int = 0
    quantization: str = "none"

    def __post_init__(self) -> None:
        if not self.source:
            raise ValueError("model must be 'default', an HF directory or a .gguf path")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(
                f"attention_backend must be one of {ATTENTION_BACKENDS}, got {self.attention_backend!r}"
            )
        if self.max_model_len is not None:
            check_positive("max_model_len", self.max_model_len)
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {self.quantization!r}")


@dataclass(slots=True)
class CacheConfig:
    block_size: int = 16
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        check_positive("block_size", self.block_size)
        if self.kv_cache_memory_bytes is not None:
            check_positive("kv_cache_memory_bytes", self.kv_cache_memory_bytes)
        check_memory_fraction(self.gpu_memory_utilization)


@dataclass(slots=True)
class SchedulerConfig:
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 4096
    max_model_len: int = 8192
    enable_chunked_prefill: bool = True
    max_queue_len: int = DEFAULT_MAX_QUEUE_LEN
    # While streams decode, shrink prefill chunks so a step takes about this long (see scheduler.py).
    max_step_latency_ms: float | None = 100.0

    def __post_init__(self) -> None:
        check_positive("max_num_seqs", self.max_num_seqs)
        check_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        check_positive("max_model_len", self.max_model_len)
        check_positive("max_queue_len", self.max_queue_len)
        _off_or_positive("max_step_latency_ms", self.max_step_latency_ms)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}) so every running sequence can decode in one step"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # Without chunking a whole prompt must fit in one step's token budget.
            raise ValueError(
                f"with enable_chunked_prefill=False, max_num_batched_tokens ({self.max_num_batched_tokens}) "
                f"must be >= max_model_len ({self.max_model_len})"
            )


@dataclass(slots=True)
class EngineConfig:
    model: str = "default"
    dtype: str = "auto"
    device: str = "auto"
    max_model_len: int | None = None
    block_size: int = 16
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 4096
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    max_queue_len: int = DEFAULT_MAX_QUEUE_LEN
    # Target for a step that carries decode rows: prefill chunks are sized from measured step cost so
    # running streams keep a bounded inter-token gap; None or 0 turns it off (full-size chunks).
    max_step_latency_ms: float | None = 100.0
    attention_backend: str = "auto"
    enforce_eager: bool = False  # CUDA: no decode graphs (slower; for debugging, as in vLLM)
    # Time each step's phases into EngineStats.step_timings (benchmarks; a synchronous step then costs a
    # device sync).
    record_step_timings: bool = False
    # Schedule and launch step N+1 while step N runs on the device, its sampled ids feeding N+1 there
    # (inference.core.async_step). None: on for CUDA, off on CPU (where the device work is synchronous).
    async_scheduling: bool | None = None
    # "gguf": a GGUF's Q4_0/Q4_1 linears stay 4-bit on CPU (less memory, faster small batches; see README)
    quantization: str = "none"
    seed: int = 0
    # Where converted GGUFs and the compiled decode kernel live (a private 0700 folder); None: ./var/cache.
    cache_dir: str | None = None
    cpu_threads: int | None = None  # torch intra-op threads on CPU; None: every core we may run on
    q4_decode: bool = True  # bf16 CPU models from a GGUF read small decode batches from its Q4 blocks
    q4_amx: bool = False  # that kernel on AMX tiles at every row count (else registers; both invariant)
    kernel_compiler: str = "c++"  # compiles that kernel when it was not built at install time
    # Folders a model source must really (symlinks followed) lie in at load; None: anywhere. "default"
    # (the bundled model) is always allowed.
    model_roots: tuple[str, ...] | None = None
    # mooncake.yaml's `engine.type`. For "openai", `model` is only where the tokenizer and chat template
    # come from (prompts are templated here and sent upstream as token ids); the weights stay upstream.
    engine_type: str = "native"
    base_url: str | None = None  # the upstream's OpenAI API root, e.g. http://vllm:8000/v1
    api_key: str | None = field(default=None, repr=False)  # sent as a Bearer token; kept out of reprs
    upstream_model: str | None = None  # the upstream's name for the model; None: the first it lists
    request_timeout: float = 600.0  # seconds the upstream may stay silent (connecting: at most 10)
    # Types vllm, sglang, tgi: passed to the server Mooncake starts (GPUs per pipeline stage, stages).
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    # The engine's command (vllm, text-generation-launcher; for sglang the Python that has it); None: the
    # web layer looks it up on PATH. The engine package reads no environment, so it is given the path.
    executable: str | None = None
    startup_timeout: float = 900.0  # seconds its server may take to answer /health (large models load slowly)
    # n-gram speculative decoding (native only); a mapping in mooncake.yaml, None: off.
    speculative: SpeculativeConfig | None = None

    def __post_init__(self) -> None:
        # Build the groups once so a bad value fails at construction, not at load time.
        self._check_engine_type()
        self.speculative = SpeculativeConfig.from_value(self.speculative)  # a mapping when built from yaml
        if self.speculative is not None and self.engine_type != "native":
            raise ValueError(
                f"speculative applies to engine type 'native' only (type is {self.engine_type!r})"
            )
        if self.async_scheduling not in (None, True, False):
            raise ValueError(
                f"async_scheduling must be true, false or null (auto), got {self.async_scheduling!r}"
            )
        self.model_config()
        self.cache_config()
        if self.cpu_threads is not None:
            check_positive("cpu_threads", self.cpu_threads)
        if self.model_roots is not None:
            self.model_roots = tuple(str(root) for root in self.model_roots)  # a list from yaml
        check_positive("max_num_seqs", self.max_num_seqs)
        check_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        check_positive("max_queue_len", self.max_queue_len)
        _off_or_positive("max_step_latency_ms", self.max_step_latency_ms)

    def _check_engine_type(self) -> None:
        kind = self.engine_type
        if kind not in ENGINE_TYPES:
            raise ValueError(f"engine type must be one of {ENGINE_TYPES}, got {kind!r}")
        check_positive("request_timeout", self.request_timeout)
        check_positive("tensor_parallel_size", self.tensor_parallel_size)
        check_positive("pipeline_parallel_size", self.pipeline_parallel_size)
        check_positive("startup_timeout", self.startup_timeout)
        if kind in SUPERVISED_TYPES:
            self._check_server()
            return
        stray = [name for name in ("executable",) if getattr(self, name) is not None]
        stray += [n for n in ("tensor_parallel_size", "pipeline_parallel_size") if getattr(self, n) != 1]
        if stray:
            raise ValueError(
                f"{', '.join(stray)} only apply to engine types {', '.join(SUPERVISED_TYPES)} "
                f"(type is {kind!r})"
            )
        if kind in IN_PROCESS_TYPES:
            stray = [
                name for name in ("base_url", "api_key", "upstream_model") if getattr(self, name) is not None
            ]
            if stray:
                raise ValueError(f"{', '.join(stray)} only apply to engine type 'openai' (type is {kind!r})")
            if kind == "transformers" and self.quantization != "none":
                raise ValueError(
                    "quantization 'gguf' applies to engine type 'native' only; engine type 'transformers' "
                    "runs the weights in dtype"
                )
            return
        if not self.base_url:
            raise ValueError("base_url is required for engine type 'openai' (e.g. http://vllm:8000/v1)")
        check_base_url(self.base_url)
        self._check_upstream_model()

    def _check_server(self) -> None:
        """A server Mooncake starts: it picks the address and starts it without a key."""
        kind = self.engine_type
        for name in ("base_url", "api_key"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{name} does not apply to engine type {kind!r}: Mooncake starts that server itself "
                    "on a local port (use type 'openai' to reach one that runs elsewhere)"
                )
        if self.executable is not None and not self.executable.strip():
            raise ValueError(
                "executable must not be empty (leave it out to find the engine's command on PATH)"
            )
        self._check_upstream_model()
        if kind == "tgi":
            # text-generation-launcher's --dtype takes only these, and it has no pipeline parallelism.
            if self.dtype not in ("auto", "float16", "bfloat16"):
                raise ValueError(f"engine type 'tgi' runs dtype float16 or bfloat16, got {self.dtype!r}")
            if self.pipeline_parallel_size != 1:
                raise ValueError(
                    "engine type 'tgi' has no pipeline parallelism: pipeline_parallel_size must be 1"
                )

    def _check_upstream_model(self) -> None:
        if self.upstream_model is not None and not self.upstream_model.strip():
            raise ValueError(
                "upstream_model must not be empty (leave it out to use the upstream's first model)"
            )

    def model_config(self) -> ModelConfig:
        return ModelConfig(
            self.model,
            self.dtype,
            self.device,
            self.max_model_len,
            self.attention_backend,
            self.seed,
            self.quantization,
        )

    def cache_config(self) -> CacheConfig:
        return CacheConfig(
            self.block_size,
            self.kv_cache_memory_bytes,
            self.gpu_memory_utilization,
            self.enable_prefix_caching,
        )

    def scheduler_config(self, max_model_len: int) -> SchedulerConfig:
        """The scheduler group, once the runner has resolved max_model_len."""
        return SchedulerConfig(
            self.max_num_seqs,
            self.max_num_batched_tokens,
            max_model_len,
            self.enable_chunked_prefill,
            self.max_queue_len,
            self.max_step_latency_ms,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EngineConfig:
        """Build from the merged mooncake.yaml `model` + `engine` sections; strings from env are coerced."""
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        unknown = []
        for key, value in d.items():
            name = _ALIASES.get(key, key)
            if name in _IGNORED_KEYS:
                continue
            if name not in names:
                unknown.append(key)
                continue
            kwargs[name] = _coerce(name, value, hints[name])
        if unknown:
            raise ValueError(f"unknown engine setting(s): {', '.join(sorted(unknown))}")
        return cls(**kwargs)


def check_base_url(url: str) -> None:
    """An absolute http(s) URL with a host: what every OpenAI-compatible server is reached by."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"base_url must be an http:// or https:// URL with a host, got {url!r}")
    if parsed.query or parsed.fragment:
        raise ValueError(f"base_url must not have a query or fragment, got {url!r}")


def _coerce(name: str, value: Any, hint: Any) -> Any:
    optional = isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if optional else hint
    if value is None or (
        optional and isinstance(value, str) and value.strip().lower() in ("", "none", "null")
    ):
        if optional:
            return None
        raise ValueError(f"{name} must not be empty")
    if base is SpeculativeConfig:
        return SpeculativeConfig.from_value(value)  # its own errors name the key that is wrong
    try:
        if base is bool:
            if isinstance(value, str):
                if value.strip().lower() in ("1", "true", "yes", "on"):
                    return True
                if value.strip().lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if base is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if base is float:
            return float(value)
        if typing.get_origin(base) is tuple:  # model_roots: a list, or one string of os.pathsep-joined paths
            parts = value if isinstance(value, list | tuple) else str(value).split(os.pathsep)
            return tuple(str(part) for part in parts if str(part))
        return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: cannot use {value!r} as {getattr(base, '__name__', base)}") from None
