"""Model sources (HF directory, GGUF file, the bundled default) -> a ready model, config and tokenizer."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from inference.cache_dir import DEFAULT_CACHE_DIR, ensure_private_dir
from inference.config import EngineConfig
from inference.config_groups import QUANTIZATIONS, CpuKernelConfig
from inference.device import resolve_device, resolve_dtype
from inference.models.gguf.convert import ensure_converted
from inference.models.gguf.reader import GGUFFile
from inference.models.loader.source import ModelSourceError, resolve_source
from inference.models.loader.weights import load_weights
from inference.models.quantization.gguf.avx2 import Avx2Kernel
from inference.models.quantization.gguf.avx512 import Avx512Kernel
from inference.models.quantization.gguf.block_only import BlockOnlyLoad, BlocksDisagree
from inference.models.quantization.setup import plan_linears, use_linear_methods
from inference.models.registry import SUPPORTED_ARCHITECTURES, get_model_class
from inference.progress import KERNELS, PLANNING, report

logger = logging.getLogger(__name__)


@dataclass
class LoadedWeights:
    """A model loaded in this process, as its engine and the console describe it (every in-process type)."""

    model: Any
    tokenizer: Any
    architecture: str
    dtype: torch.dtype
    device: torch.device
    num_params: int
    size_on_disk: int
    context_length: int
    eos_token_ids: set[int]


@dataclass
class LoadedModel(LoadedWeights):
    """Ours: the weights in our model classes, with the HF config and the folder they were read from."""

    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    hf_config: PretrainedConfig
    model_dir: Path
    source: str
    # The native CPU kernels (csrc/) are loaded for this model: prompt attention may use them too.
    avx512_kernels: bool = False
    # Its projections read a GGUF's blocks through kernels/csrc/avx2 (fp32): attention takes that library's.
    avx2_kernels: bool = False


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """Everything a load reads: the source and its confinement, the dtype and device, the quantization, and
    the CPU kernels' settings (their cache folder among them)."""

    source: str
    dtype: str = "auto"
    device: str = "auto"
    quantization: str = "none"
    kernels: CpuKernelConfig = field(default_factory=CpuKernelConfig)
    model_roots: tuple[str, ...] | None = None  # None: anywhere

    @classmethod
    def of(cls, config: EngineConfig) -> LoadConfig:
        return cls(
            config.model,
            config.dtype,
            config.device,
            config.quantization,
            config.cpu_kernels(),
            config.model_roots,
        )

    @property
    def cache_dir(self) -> Path:
        return Path(self.kernels.cache_dir) if self.kernels.cache_dir else DEFAULT_CACHE_DIR


def load_from_config(config: EngineConfig) -> LoadedModel:
    return load(LoadConfig.of(config))


def load_model(source: str, *, cache_dir: Path | str | None = None, **settings: Any) -> LoadedModel:
    """load() from keywords (tests, benchmarks): LoadConfig's fields and CpuKernelConfig's by name."""
    kernel_names = {f.name for f in fields(CpuKernelConfig)}
    kernel_settings = {k: v for k, v in settings.items() if k in kernel_names}
    rest = {k: v for k, v in settings.items() if k not in kernel_names}
    if cache_dir is not None:
        kernel_settings["cache_dir"] = str(cache_dir)
    if rest.get("model_roots") is not None:
        rest["model_roots"] = tuple(rest["model_roots"])
    return load(LoadConfig(source, kernels=CpuKernelConfig(**kernel_settings), **rest))


def load(cfg: LoadConfig) -> LoadedModel:
    """Load `cfg.source` ("default", a HF directory or a .gguf) with our own model implementation, its
    weights held and multiplied as the weight plan says (quantization/plan.py)."""
    started = time.monotonic()
    source = cfg.source
    path = resolve_source(source, model_roots=cfg.model_roots)
    cache = ensure_private_dir(cfg.cache_dir) if path.is_file() else None
    # A GGUF's config and tokenizer come from the cache; its weights from the file itself unless a path
    # needs a dense copy of every projection (below).
    model_dir = ensure_converted(path, cache, weights=False) if cache is not None else path
    hf_config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    architecture = _architecture(hf_config)
    model_cls = get_model_class(architecture)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    torch_device = resolve_device(cfg.device)
    if cfg.quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {cfg.quantization!r}")
    report(PLANNING)
    setup = plan_linears(
        path,
        device=torch_device,
        dtype=cfg.dtype,
        quantization=cfg.quantization,
        kernels=cfg.kernels,
        num_heads=hf_config.num_attention_heads,
        num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads,
    )
    # The plan's dtype ("auto" resolved as the kernels' facts say: cpu_isa may take bf16 away).
    torch_dtype = resolve_dtype(setup.weights.dtype, torch_device)
    kernel, blocks = setup.plan.kernel, setup.blocks

    with torch.device("meta"):
        model = model_cls(hf_config)
    num_params = sum(p.numel() for p in model.parameters())
    block_only = None
    if kernel is not None and blocks is not None and not setup.plan.dense_copy:
        block_only = BlockOnlyLoad.plan(model, blocks)
        block_only.drop_dense(model)  # those projections are never held dense, even while loading
    # Cast while still on meta, then materialize on the target device in the final dtype: no throwaway
    # random init and no transient fp32 copy of a model that should only ever be bf16 on the GPU.
    model = model.to(torch_dtype).to_empty(device=torch_device)
    gguf = None
    if cache is not None and block_only is not None:
        gguf = GGUFFile(path)  # every projection it reads as blocks: the rest straight from the file
    elif cache is not None:
        model_dir = ensure_converted(path, cache)  # dense projections: the dequantized safetensors copy
    try:
        load_weights(model, model_dir, blocks=block_only, gguf=gguf)
    except BlocksDisagree as exc:
        logger.error("%s; loading %s again with a dense bf16 copy of its projections", exc, path.name)
        return load(replace(cfg, kernels=replace(cfg.kernels, gguf_dense_copy=True)))
    model.eval()
    report(KERNELS)  # the layers take their kernels (packing tiles, self-checks)
    if block_only is not None and kernel is not None and blocks is not None:
        block_only.attach(model, kernel, parsed=blocks.linears)
    use_linear_methods(model, setup, path)
    loaded = LoadedModel(
        model=model,
        hf_config=hf_config,
        tokenizer=tokenizer,
        model_dir=model_dir,
        source=source,
        architecture=architecture,
        dtype=torch_dtype,
        device=torch_device,
        num_params=num_params,
        size_on_disk=_size_on_disk(path),
        context_length=model_cls.context_length(hf_config),
        eos_token_ids=_eos_token_ids(hf_config, tokenizer, model_dir),
        avx512_kernels=isinstance(kernel, Avx512Kernel),
        avx2_kernels=isinstance(kernel, Avx2Kernel),
    )
    logger.info(
        "Loaded %s (%s, %.1fM params, %s on %s) in %.1fs",
        source,
        architecture,
        num_params / 1e6,
        torch_dtype,
        torch_device,
        time.monotonic() - started,
    )
    return loaded


def _architecture(hf_config: PretrainedConfig) -> str:
    architectures = getattr(hf_config, "architectures", None) or []
    for name in architectures:
        if name in SUPPORTED_ARCHITECTURES:
            return str(name)
    raise ModelSourceError(
        f"our engine does not implement architecture {architectures or hf_config.model_type!r} "
        f"(it runs {', '.join(SUPPORTED_ARCHITECTURES)}); set `type: transformers` in the model's engine "
        "settings to run it with transformers' own continuous batching"
    )


def _size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _eos_token_ids(
    hf_config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase, model_dir: Path
) -> set[int]:
    """Union of config, generation_config.json and tokenizer EOS ids: chat models often list several."""
    ids: set[int] = set()
    candidates: list[object] = [getattr(hf_config, "eos_token_id", None), tokenizer.eos_token_id]
    gen_path = model_dir / "generation_config.json"
    if gen_path.is_file():
        try:
            candidates.append(json.loads(gen_path.read_text()).get("eos_token_id"))
        except (OSError, ValueError):
            logger.warning("Ignoring unreadable %s", gen_path)
    for value in candidates:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))
    return ids
