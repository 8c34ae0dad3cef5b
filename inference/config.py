"""Engine configuration: EngineConfig is the flat form users write (mooncake.yaml's `model` and `engine`
sections), with the common settings and every engine type's own; it builds the typed groups each engine
type reads (inference.config_groups), so a bad value fails at construction with the setting's name.

Over 300 lines: the one flat form of every engine setting users write, each field with its reason, and the
checks that tie settings of different groups together.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inference.config_groups import (
    DEFAULT_MAX_QUEUE_LEN,
    QUANTIZATION_ALIASES,
    REMOTE_SETTINGS,
    SERVER_SETTINGS,
    CacheConfig,
    CpuKernelConfig,
    ModelConfig,
    RemoteSettings,
    SchedulerConfig,
    ServerSettings,
    check_batch_holds_sequences,
    check_positive,
    check_task,
    off_or_positive,
)
from inference.config_values import coerce
from inference.speculative_config import SpeculativeConfig

# Who runs the model: "native" is our engine in this process; "transformers" transformers' own
# continuous batching in this process, for architectures ours lacks (inference.frontends.transformers.engine);
# "openai" an existing server that speaks the OpenAI API (vLLM, SGLang, TGI, llama-server, Ollama)
# at base_url (inference.frontends.remote.engine);
# "vllm", "sglang", "tgi" that engine's own server, started here as a supervised child process and then
# reached as "openai" reaches one (inference.frontends.supervised.engine).
SUPERVISED_TYPES = ("vllm", "sglang", "tgi")
EXPERT_PARALLEL_TYPES = ("vllm", "sglang")  # TGI's launcher has no expert parallelism
IN_PROCESS_TYPES = ("native", "transformers")
ENGINE_TYPES = (*IN_PROCESS_TYPES, "openai", *SUPERVISED_TYPES)
# Keys of the mooncake.yaml `model`/`engine` sections that belong to other layers.
_IGNORED_KEYS = frozenset({"name", "aliases", "keep_alive", "keep_alive_seconds"})
# Other names a setting is read by: yaml shorthands, and the names settings had before (kept working).
_ALIASES = {
    "model_id": "model",
    "type": "engine_type",
    "q4_decode": "gguf_kernels",
    "q4_amx": "gguf_amx_decode",
}
# EngineConfig fields that only a remote engine (`openai` or a supervised type) reads.
REMOTE_FIELDS = (*REMOTE_SETTINGS, *SERVER_SETTINGS)

# What each engine type reads: the common settings, then its own. The native engine reads every setting
# but a remote engine's; transformers' batching the in-process ones; `openai` the RemoteSettings; a
# supervised server its ServerSettings and the flags it is started with (frontends.supervised.process).
# `mooncake check` refuses a setting written for a model whose type never reads it (settings_not_read).
_COMMON_FIELDS = (
    "model",
    "task",
    "engine_type",
    "max_model_len",
    "max_queue_len",
    "model_roots",
    "cache_dir",
)
_IN_PROCESS_FIELDS = (
    *("dtype", "device", "seed", "cpu_threads", "kv_cache_memory_bytes", "gpu_memory_utilization"),
    *("max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching"),
)
_SERVER_FLAGS = ("dtype", "gpu_memory_utilization", "max_num_seqs")


def fields_read_by(engine_type: str) -> frozenset[str]:
    """The EngineConfig fields an engine of this type reads."""
    if engine_type == "transformers":
        return frozenset((*_COMMON_FIELDS, *_IN_PROCESS_FIELDS))
    if engine_type == "openai":
        return frozenset((*_COMMON_FIELDS, *REMOTE_SETTINGS))
    if engine_type in SUPERVISED_TYPES:
        upstream = ("upstream_model", "request_timeout")  # its address and key are Mooncake's to pick
        return frozenset((*_COMMON_FIELDS, *upstream, *_SERVER_FLAGS, *SERVER_SETTINGS))
    return frozenset(f.name for f in dataclasses.fields(EngineConfig)) - frozenset(REMOTE_FIELDS)


def settings_not_read(config: EngineConfig, given: Iterable[str]) -> list[str]:
    """Of the settings `given` for this model, those set to other than the default that its engine type
    never reads: they would show in `mooncake check` as in force and change nothing."""
    read = fields_read_by(config.engine_type)
    defaults = EngineConfig()
    return sorted(
        name for name in given if name not in read and getattr(config, name) != getattr(defaults, name, None)
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
    # Time each step's phases into EngineStats.step_timings (benchmarks; a synchronous step syncs the device)
    record_step_timings: bool = False
    # Schedule and launch step N+1 while step N runs on the device, its sampled ids feeding N+1 there
    # (inference.core.async_step). None: on for CUDA, off on CPU (where the device work is synchronous).
    async_scheduling: bool | None = None
    # "int4": a GGUF's Q4_0/Q4_1 linears stay 4-bit on CPU (less memory, faster small batches; see README)
    quantization: str = "none"
    seed: int = 0
    # Where converted GGUFs and the compiled decode kernel live (a private 0700 folder); None: ./var/cache.
    cache_dir: str | None = None
    cpu_threads: int | None = None  # torch intra-op threads on CPU; None: every core we may run on
    # The CPU kernels' settings (CpuKernelConfig, cpu_kernels()): read a GGUF's blocks (bf16 decoding rows,
    # or every fp32 batch on AVX2 CPUs); Q4/Q8_0 decoding rows on AMX tiles at every row count.
    gguf_kernels: bool = True
    gguf_amx_decode: bool = False
    kquant_activations: str = "int16"  # K-quant decoding rows (AVX2: every block row): KQUANT_ACTIVATIONS
    # Keep a dense bf16 copy of the projections a GGUF stores in blocks the kernels read (2 bytes per weight
    # more), which prompts and batches past 16 rows then multiply with. None: only where the CPU lacks AMX
    # (the blocks' register batch path is several times slower than oneDNN's); on AVX2: dense fp32 instead.
    gguf_dense_copy: bool | None = None
    kernel_compiler: str = "c++"  # compiles that kernel when it was not built at install time
    cpu_isa: str = "auto"  # the most the CPU kernels may use (CPU_ISAS): "avx512" without AMX, "avx2", "none"
    # Folders a model source must really (symlinks followed) lie in at load; None: anywhere. "default"
    # (the bundled model) is always allowed.
    model_roots: tuple[str, ...] | None = None
    # mooncake.yaml's `engine.type`. For "openai", `model` is only where the tokenizer and chat template
    # come from (prompts are templated here and sent upstream as token ids); the weights stay upstream.
    engine_type: str = "native"
    # How a remote engine reaches its upstream: RemoteSettings (remote()) says what each means.
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    upstream_model: str | None = None
    request_timeout: float = 600.0
    # Types vllm, sglang, tgi: the server Mooncake starts, ServerSettings (server()).
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    expert_parallel: bool = False  # MoE experts spread over the tensor-parallel GPUs (vllm, sglang)
    executable: str | None = None
    startup_timeout: float = 900.0
    extra_args: tuple[str, ...] = ()
    # n-gram speculative decoding (native only); a mapping in mooncake.yaml, None: off.
    speculative: SpeculativeConfig | None = None
    task: str = "generate"  # one of TASKS

    def __post_init__(self) -> None:
        # Build the groups once so a bad value fails at construction, not at load time.
        self._check_engine_type()
        check_task(self.task, self.engine_type)
        # quantization "gguf" kept only Q4_0/Q4_1 4-bit, which "int4" now says.
        self.quantization = QUANTIZATION_ALIASES.get(self.quantization, self.quantization)
        self.speculative = SpeculativeConfig.from_value(self.speculative)  # a mapping when built from yaml
        if self.speculative is not None and self.engine_type != "native":
            raise ValueError(
                f"speculative applies to engine type 'native' only (type is {self.engine_type!r})"
            )
        self.cpu_kernels()
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
        self.extra_args = tuple(self.extra_args)  # a list from yaml
        check_positive("max_num_seqs", self.max_num_seqs)
        check_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        check_positive("max_queue_len", self.max_queue_len)
        off_or_positive("max_step_latency_ms", self.max_step_latency_ms)
        if self.engine_type in IN_PROCESS_TYPES:  # refused here, so `mooncake check` says it before a load
            check_batch_holds_sequences(self.max_num_batched_tokens, self.max_num_seqs)

    def _check_engine_type(self) -> None:
        kind = self.engine_type
        if kind not in ENGINE_TYPES:
            raise ValueError(f"engine type must be one of {ENGINE_TYPES}, got {kind!r}")
        self.remote()
        self.server()
        if self.expert_parallel and kind not in EXPERT_PARALLEL_TYPES:
            raise ValueError(
                f"expert_parallel applies to engine types {', '.join(EXPERT_PARALLEL_TYPES)} only (type is "
                f"{kind!r}); set it to false or leave it out"
            )
        if kind in SUPERVISED_TYPES:
            self._check_server()
            return
        stray = [name for name in ("executable",) if getattr(self, name) is not None]
        stray += ["extra_args"] if self.extra_args else []
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
                    "quantization 'int4' applies to engine type 'native' only; engine type 'transformers' "
                    "runs the weights in dtype"
                )
            return
        if not self.base_url:
            raise ValueError("base_url is required for engine type 'openai' (e.g. http://vllm:8000/v1)")

    def _check_server(self) -> None:
        """A server Mooncake starts: it picks the address and starts it without a key."""
        kind = self.engine_type
        for name in ("base_url", "api_key"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{name} does not apply to engine type {kind!r}: Mooncake starts that server itself "
                    "on a local port (use type 'openai' to reach one that runs elsewhere)"
                )
        if kind == "tgi":
            # text-generation-launcher's --dtype takes only these, and it has no pipeline parallelism.
            if self.dtype not in ("auto", "float16", "bfloat16"):
                raise ValueError(f"engine type 'tgi' runs dtype float16 or bfloat16, got {self.dtype!r}")
            if self.pipeline_parallel_size != 1:
                raise ValueError(
                    "engine type 'tgi' has no pipeline parallelism: pipeline_parallel_size must be 1"
                )

    def remote(self) -> RemoteSettings:
        """How a remote engine (`openai`, or a supervised type once its server runs) reaches its upstream."""
        return RemoteSettings(self.base_url, self.api_key, self.upstream_model, self.request_timeout)

    def server(self) -> ServerSettings:
        """The server Mooncake starts for a supervised type."""
        return ServerSettings(
            self.tensor_parallel_size,
            self.pipeline_parallel_size,
            self.executable,
            self.startup_timeout,
            self.extra_args,
            self.expert_parallel,
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

    def cpu_kernels(self) -> CpuKernelConfig:
        return CpuKernelConfig(
            self.gguf_kernels,
            self.gguf_amx_decode,
            self.kquant_activations,
            self.gguf_dense_copy,
            self.kernel_compiler,
            self.cache_dir,
            self.cpu_isa,
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
            kwargs[name] = coerce(name, value, hints[name])
        if unknown:
            raise ValueError(f"unknown engine setting(s): {', '.join(sorted(unknown))}")
        return cls(**kwargs)
