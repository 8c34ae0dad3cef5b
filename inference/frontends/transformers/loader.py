"""Load a model for engine type "transformers": transformers' own model class, from safetensors only.

Sources are those inference.models.loader.load takes ("default", a Hugging Face directory, a .gguf file
converted
once into a cached safetensors folder), under the same rules: pickles refused, model roots checked again here
at load, trust_remote_code off (only architectures transformers itself implements)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from inference.cache_dir import DEFAULT_CACHE_DIR, ensure_private_dir
from inference.config import EngineConfig
from inference.device import cpu_thread_count, resolve_device, resolve_dtype
from inference.models.gguf.convert import ensure_converted
from inference.models.loader.load import LoadedWeights, _eos_token_ids, _size_on_disk
from inference.models.loader.source import ModelSourceError, resolve_source

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT = 4096  # a config naming no context length


def load_transformers_model(config: EngineConfig) -> LoadedWeights:
    started = time.monotonic()
    path = resolve_source(config.model, model_roots=config.model_roots)
    if path.is_file():  # a GGUF: transformers reads the folder our converter makes once
        cache = ensure_private_dir(Path(config.cache_dir) if config.cache_dir else DEFAULT_CACHE_DIR)
        model_dir = ensure_converted(path, cache)
    else:
        model_dir = path
    hf_config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    architecture = _causal_lm_architecture(hf_config)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    if device.type == "cpu":
        torch.set_num_threads(cpu_thread_count(config.cpu_threads))
    model = AutoModelForCausalLM.from_pretrained(
        model_dir,
        dtype=dtype,
        use_safetensors=True,  # never a pickle, even if one lies beside the safetensors
        trust_remote_code=False,
    )
    model = cast(Any, model).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    num_params = sum(p.numel() for p in model.parameters())
    logger.info(
        "Loaded %s with transformers (%s, %.1fM params, %s on %s) in %.1fs",
        config.model,
        architecture,
        num_params / 1e6,
        dtype,
        device,
        time.monotonic() - started,
    )
    return LoadedWeights(
        model=model,
        tokenizer=tokenizer,
        architecture=architecture,
        dtype=dtype,
        device=device,
        num_params=num_params,
        size_on_disk=_size_on_disk(path),
        context_length=_context_length(hf_config),
        eos_token_ids=_eos_token_ids(hf_config, tokenizer, model_dir),
    )


def _causal_lm_architecture(hf_config: PretrainedConfig) -> str:
    """The config's architecture, if transformers itself has a causal LM for its model type."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelSourceError(
            f"transformers has no causal language model for model type {model_type!r}; models that need "
            "their own code (trust_remote_code) are not loaded"
        )
    architectures = getattr(hf_config, "architectures", None) or []
    return str(architectures[0]) if architectures else MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[str(model_type)]


def _context_length(hf_config: PretrainedConfig) -> int:
    text = hf_config.get_text_config()
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else DEFAULT_CONTEXT
