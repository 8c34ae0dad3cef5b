"""Engine configuration: EngineConfig is the flat form users write (mooncake.yaml's `model` and `engine`
sections), with the common settings and every engine type's own; it builds the typed groups each engine
type reads (inference.config_groups), so a bad value fails at construction with the setting's name.

Over 300 lines: the one flat form of every engine setting users write, each field with its description
(docs/configuration/reference.md is generated from them) and its reason, and the checks that tie settings
of different groups together.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from inference.config_groups import (
    ATTENTION_BACKENDS,
    CPU_ISAS,
    DEFAULT_MAX_QUEUE_LEN,
    DEVICES,
    DTYPES,
    KQUANT_ACTIVATIONS,
    KV_CACHE_DTYPES,
    QUANTIZATION_ALIASES,
    QUANTIZATIONS,
    REMOTE_SETTINGS,
    SERVER_SETTINGS,
    TASKS,
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
from inference.config_values import coerce, setting
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
# The names mooncake.yaml writes for fields named otherwise here (the configuration reference shows these).
YAML_NAMES = {"model_id": "model", "type": "engine_type"}
# Other names a setting is read by: the yaml's, and the names settings had before (kept working).
_ALIASES = {**YAML_NAMES, "q4_decode": "gguf_kernels", "q4_amx": "gguf_amx_decode"}
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
    # Each field's doc is its line in docs/configuration/reference.md (tools/config_reference.py); the
    # comments say why.
    model: str = setting(
        "default", "`default` (bundled SmolLM2), a Hugging Face folder, a .gguf or a hub id; also model_path"
    )
    dtype: str = setting("auto", "auto: bf16 on GPUs and AMX/AVX512-BF16 CPUs, else fp32", choices=DTYPES)
    device: str = setting("auto", "Where the model runs (also cuda:N)", choices=DEVICES)
    max_model_len: int | None = setting(None, "Longest prompt and reply in tokens; null: the model's context")
    block_size: int = setting(16, "Tokens per page of the paged KV cache")
    kv_cache_memory_bytes: int | None = setting(
        None, "The KV cache's bytes; null: from gpu_memory_utilization (GPU), or the model and RAM (CPU)"
    )
    # An explicit dtype float32 keeps greedy outputs equal to transformers' (layers/kv_budget.py).
    kv_cache_dtype: str = setting(
        "auto",
        "What the KV cache stores K and V in; auto: the compute dtype, but float16 on a CPU where dtype auto"
        " chose float32",
        choices=KV_CACHE_DTYPES,
    )
    gpu_memory_utilization: float = setting(0.9, "Share of the GPU's memory the engine may use, in (0, 1]")
    max_num_seqs: int = setting(64, "The most sequences running at once")
    max_num_batched_tokens: int = setting(4096, "The most tokens one step computes (prompt chunks and rows)")
    enable_chunked_prefill: bool = setting(True, "Split a long prompt over steps, so streams keep decoding")
    enable_prefix_caching: bool = setting(True, "Reuse the KV cache of a prompt prefix computed before")
    max_queue_len: int = setting(
        DEFAULT_MAX_QUEUE_LEN, "Requests that may wait; past it one is refused (503)"
    )
    # Prefill chunks are sized from measured step cost so running streams keep a bounded inter-token gap.
    max_step_latency_ms: float | None = setting(
        100.0, "Target for a step that carries decoding rows (prefill chunks fit it); null or 0: off"
    )
    attention_backend: str = setting(
        "auto", "GPU: Triton paged decode unless flash-attn fits", choices=ATTENTION_BACKENDS
    )
    enforce_eager: bool = setting(False, "CUDA: no decode graphs (slower; for debugging, as in vLLM)")
    record_step_timings: bool = setting(False, "Time each step's phases into the stats (benchmarks; syncs)")
    # Step N's sampled ids feed N+1 on the device (inference.core.async_step); CPU work is synchronous.
    async_scheduling: bool | None = setting(
        None, "Schedule step N+1 while step N runs on the device; null: on for CUDA, off on CPU"
    )
    quantization: str = setting(
        "none", "int4: a GGUF's Q4_0/Q4_1 linears stay 4-bit on CPU (less memory)", choices=QUANTIZATIONS
    )
    seed: int = setting(0, "Seed of the sampler's generator (requests may give their own)")
    cache_dir: str | None = setting(None, "Converted GGUFs and the compiled CPU kernel (a private folder)")
    cpu_threads: int | None = setting(None, "torch's intra-op threads on CPU; null: every core we may use")
    # The CPU kernels' settings (CpuKernelConfig, cpu_kernels()).
    gguf_kernels: bool = setting(True, "Read a GGUF's blocks as stored, where this CPU's kernel passes")
    gguf_amx_decode: bool = setting(False, "Q4/Q8_0 decoding rows on AMX tiles at every row count")
    kquant_activations: str = setting(
        "auto",
        "Block kernels' activations: int16, int8 (llama.cpp's) or bf16; auto: on AVX2 int8 for a file of"
        " Q4/Q8_0 blocks, int16 for one with K-quants (by measured perplexity); elsewhere int16",
        choices=KQUANT_ACTIVATIONS,
    )
    # Without AMX the blocks' register batch path is several times slower than oneDNN's, hence the default.
    gguf_dense_copy: bool | None = setting(
        None, "A dense copy of block-read weights for batches past 16 rows; null: where the CPU lacks AMX"
    )
    kernel_compiler: str = setting("c++", "Compiles the CPU kernel when install did not build it")
    cpu_isa: str = setting("auto", "The most the CPU kernels may use (none: torch's ops)", choices=CPU_ISAS)
    model_roots: tuple[str, ...] | None = setting(
        None, "Folders a model must really (symlinks followed) lie in at load; null: anywhere"
    )
    # For "openai", `model` is only where the tokenizer and chat template come from (prompts are templated
    # here and sent upstream as token ids); the weights stay upstream.
    engine_type: str = setting(
        "native", "Who runs the model (the types are described above)", choices=ENGINE_TYPES
    )
    # How a remote engine reaches its upstream: RemoteSettings (remote()).
    base_url: str | None = setting(None, "The upstream's OpenAI API root, e.g. http://vllm:8000/v1")
    api_key: str | None = setting(
        None, "Sent as a Bearer token (or engine.api_key_env names it)", secret=True
    )
    upstream_model: str | None = setting(None, "The upstream's name for the model; null: the first it lists")
    request_timeout: float = setting(600.0, "Seconds the upstream may stay silent (connecting: at most 10)")
    # Types vllm, sglang, tgi: the server Mooncake starts, ServerSettings (server()).
    tensor_parallel_size: int = setting(1, "GPUs per pipeline stage")
    pipeline_parallel_size: int = setting(1, "Pipeline stages (not tgi)")
    expert_parallel: bool = setting(False, "A mixture-of-experts model's experts spread over the GPUs")
    executable: str | None = setting(None, "The engine's command (sglang: the Python); null: from PATH")
    startup_timeout: float = setting(900.0, "Seconds the server may take to answer /health")
    extra_args: tuple[str, ...] = setting((), "Added to the server's command line after Mooncake's flags")
    # A mapping in mooncake.yaml; the speculative.* keys are SpeculativeConfig's fields.
    speculative: SpeculativeConfig | None = setting(None, "n-gram speculative decoding; null: off")  # noqa: RUF009
    task: str = setting("generate", "generate (chat, completions) or embed (/v1/embeddings)", choices=TASKS)

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
            self.kv_cache_dtype,
        )

    def scheduler_config(
        self, max_model_len: int, *, replay_outputs_as_rows: bool = False
    ) -> SchedulerConfig:
        """The scheduler group, once the runner has resolved max_model_len and its rows' path."""
        return SchedulerConfig(
            self.max_num_seqs,
            self.max_num_batched_tokens,
            max_model_len,
            self.enable_chunked_prefill,
            self.max_queue_len,
            self.max_step_latency_ms,
            replay_outputs_as_rows,
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
