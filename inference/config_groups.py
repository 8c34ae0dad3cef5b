"""The engine's settings in typed groups, each validated where it is built so an error names the setting.

The native engine reads ModelConfig, CacheConfig and SchedulerConfig (grouped by concern, as vLLM's are);
an upstream server is reached with RemoteSettings, and one Mooncake starts is run with ServerSettings.
EngineConfig (inference.config) is the flat form users write, which builds these.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field, fields

# The choice lists, defined once: validation here, the attention selector and the console's forms use them.
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
# What the paged KV cache stores K and V in, whatever the compute dtype; "auto": the compute dtype
# (inference/models/layers/kv_budget.py resolves it, and says why).
KV_CACHE_DTYPES = DTYPES
ATTENTION_BACKENDS = ("auto", "torch", "triton", "flash_attn")
# "int4": a GGUF's Q4_0/Q4_1 projections kept 4-bit in torch's int4 layout (CPU, bf16). Its old name
# "gguf" is still read (inference.config's alias table).
QUANTIZATIONS = ("none", "int4")
QUANTIZATION_ALIASES = {"gguf": "int4"}  # old value -> its name now
# How block kernels meet activations: quantized to 14 or 8 bits (integer dot products; int8 is llama.cpp's
# numerics), or bf16 (AVX-512 K-quant decoding rows: the exact product of the dequantized weights). "auto":
# on AVX2, int8 for a file of Q4_0/Q4_1/Q8_0 blocks and 14 bits for one with K-quants, as measured
# perplexity allows (within llama.cpp's distance of an fp32 reference; README "Accuracy"); elsewhere int16.
KQUANT_ACTIVATIONS = ("auto", "int16", "int8", "bf16")
# The most a CPU's native kernels may use: "auto" all it has (AMX tiles, AVX512-BF16, AVX2), "avx512" no AMX
# tiles (the Zen 4 / Ice Lake path, forced on an AMX CPU), "avx2" the AVX2 path (dtype auto is fp32), "none"
# no native kernels at all (torch's own ops, as on a CPU without AVX2).
CPU_ISAS = ("auto", "avx512", "avx2", "none")

# What a model is served for: "generate" (chat and completions) or "embed" (/v1/embeddings, run by our
# embedding front-end, inference.frontends.embedding, so only with engine type native).
TASKS = ("generate", "embed")

# Defaults other layers size themselves by (the API refuses a request the queue could never hold).
DEFAULT_MAX_QUEUE_LEN = 256


def check_positive(name: str, value: int | float) -> None:
    """The one positivity rule: EngineConfig, its groups and the model runner all apply it."""
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_batch_holds_sequences(max_num_batched_tokens: int, max_num_seqs: int) -> None:
    if max_num_batched_tokens < max_num_seqs:
        raise ValueError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be >= max_num_seqs "
            f"({max_num_seqs}) so every running sequence can decode in one step"
        )


def check_task(task: str, engine_type: str) -> None:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task == "embed" and engine_type != "native":
        raise ValueError(f"task 'embed' runs on engine type 'native' only (type is {engine_type!r})")


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_kv_cache_dtype(value: object) -> None:
    if value not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)} (auto: chosen with the dtype), "
            f"got {value!r}"
        )


def check_memory_fraction(value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {value}")


def off_or_positive(name: str, value: float | None) -> None:
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


@dataclass(frozen=True, slots=True)
class CpuKernelConfig:
    """How the native CPU kernels are used and built (inference/models/quantization/plan.py decides with
    it)."""

    gguf_kernels: bool = True  # read a GGUF's blocks as stored where a kernel for this CPU passes its check
    gguf_amx_decode: bool = False  # Q4/Q8_0 decoding rows on AMX tiles at every row count (else registers)
    kquant_activations: str = "auto"  # how block kernels meet activations: KQUANT_ACTIVATIONS
    # Keep a dense copy of the block-read projections, for prompts and large batches; None: the plan
    # decides (bf16: only where AMX tiles are not available; fp32 AVX2: never).
    gguf_dense_copy: bool | None = None
    kernel_compiler: str = "c++"  # compiles a kernel that was not built at install time
    cache_dir: str | None = None  # where compiled kernels (and converted GGUFs) live; None: ./var/cache
    cpu_isa: str = "auto"  # CPU_ISAS: the most the native kernels may use

    def __post_init__(self) -> None:
        check_choice("kquant_activations", self.kquant_activations, KQUANT_ACTIVATIONS)
        check_choice("cpu_isa", self.cpu_isa, CPU_ISAS)
        if self.gguf_amx_decode and self.cpu_isa != "auto":
            raise ValueError(f"gguf_amx_decode needs AMX tiles, which cpu_isa {self.cpu_isa!r} leaves out")
        if self.gguf_dense_copy not in (None, True, False):
            raise ValueError(
                f"gguf_dense_copy must be true, false or null (auto), got {self.gguf_dense_copy!r}"
            )


@dataclass(slots=True)
class CacheConfig:
    block_size: int = 16
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"

    def __post_init__(self) -> None:
        check_positive("block_size", self.block_size)
        check_kv_cache_dtype(self.kv_cache_dtype)
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
    # Not a setting: the runner's. Decoding rows round apart from prompt chunks (CPU block kernels), so a
    # sequence recomputed after a preemption replays its generated tokens as decoding rows.
    replay_outputs_as_rows: bool = False

    def __post_init__(self) -> None:
        check_positive("max_num_seqs", self.max_num_seqs)
        check_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        check_positive("max_model_len", self.max_model_len)
        check_positive("max_queue_len", self.max_queue_len)
        off_or_positive("max_step_latency_ms", self.max_step_latency_ms)
        check_batch_holds_sequences(self.max_num_batched_tokens, self.max_num_seqs)
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # Without chunking a whole prompt must fit in one step's token budget.
            raise ValueError(
                f"with enable_chunked_prefill=False, max_num_batched_tokens ({self.max_num_batched_tokens}) "
                f"must be >= max_model_len ({self.max_model_len})"
            )


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    """How an OpenAI-compatible upstream is reached: engine type openai, and the supervised types (whose
    address Mooncake picks itself: base_url and api_key stay None)."""

    base_url: str | None = None  # the upstream's OpenAI API root, e.g. http://vllm:8000/v1
    api_key: str | None = field(default=None, repr=False)  # sent as a Bearer token; kept out of reprs
    upstream_model: str | None = None  # the upstream's name for the model; None: the first it lists
    request_timeout: float = 600.0  # seconds the upstream may stay silent (connecting: at most 10)

    def __post_init__(self) -> None:
        check_positive("request_timeout", self.request_timeout)
        if self.base_url is not None:
            check_base_url(self.base_url)
        if self.upstream_model is not None and not self.upstream_model.strip():
            raise ValueError(
                "upstream_model must not be empty (leave it out to use the upstream's first model)"
            )


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The server Mooncake starts for types vllm, sglang and tgi (as flags: frontends.supervised.process)."""

    tensor_parallel_size: int = 1  # GPUs per pipeline stage
    pipeline_parallel_size: int = 1  # stages
    # The engine's command (vllm, text-generation-launcher; for sglang the Python that has it); None: the
    # web layer looks it up on PATH. The engine package reads no environment, so it is given the path.
    executable: str | None = None
    startup_timeout: float = 900.0  # seconds its server may take to answer /health (large models load slowly)
    # Passed through to the server's command line as given, after the flags Mooncake sets (the engine's
    # own options Mooncake has no setting for: --quantization fp8, ...).
    extra_args: tuple[str, ...] = ()
    # A mixture-of-experts model's experts spread over the tensor-parallel GPUs (vllm and sglang only).
    expert_parallel: bool = False

    def __post_init__(self) -> None:
        if not all(isinstance(arg, str) and arg for arg in self.extra_args):
            raise ValueError(f"extra_args must be a list of non-empty strings, got {list(self.extra_args)!r}")
        check_positive("tensor_parallel_size", self.tensor_parallel_size)
        check_positive("pipeline_parallel_size", self.pipeline_parallel_size)
        check_positive("startup_timeout", self.startup_timeout)
        if not isinstance(self.expert_parallel, bool):
            raise ValueError(f"expert_parallel must be true or false, got {self.expert_parallel!r}")
        if self.executable is not None and not self.executable.strip():
            raise ValueError(
                "executable must not be empty (leave it out to find the engine's command on PATH)"
            )


REMOTE_SETTINGS = tuple(f.name for f in fields(RemoteSettings))
SERVER_SETTINGS = tuple(f.name for f in fields(ServerSettings))


def check_base_url(url: str) -> None:
    """An absolute http(s) URL with a host: what every OpenAI-compatible server is reached by."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"base_url must be an http:// or https:// URL with a host, got {url!r}")
    if parsed.query or parsed.fragment:
        raise ValueError(f"base_url must not have a query or fragment, got {url!r}")
