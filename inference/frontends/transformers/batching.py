"""Our settings and sampling parameters as transformers' continuous batching takes them.

Its sampler applies temperature, top_k and top_p per request (per_request_processors); everything else
ours offers (penalties, seeds, min_p, logit_bias, logprobs, grammars) has no per-request form there, so such
a request is refused up front with the parameter named, rather than silently run with it ignored.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from inference.config import EngineConfig
from inference.models.layers.kv_budget import cpu_kv_budget
from inference.sampling_params import SamplingParams

PAGE_SIZE = 256  # transformers' default page; its paged kernels are tuned for it

# (parameter, neutral value): any other value needs a sampler this engine does not have.
_NEUTRAL: tuple[tuple[str, object], ...] = (
    ("min_p", 0.0),
    ("presence_penalty", 0.0),
    ("frequency_penalty", 0.0),
    ("repetition_penalty", 1.0),
    ("seed", None),
    ("min_tokens", 0),
    ("logprobs", None),
    ("prompt_logprobs", None),
)


def check_sampling(params: SamplingParams) -> None:
    """ValueError naming what engine type 'transformers' cannot honour in `params`."""
    if params.logits_processors:
        raise ValueError(
            "response_format (json_object, json_schema) and forced tool calls are not available for this "
            "model: engine type 'transformers' runs transformers' own sampler, where our grammar masks "
            "cannot run (use engine type 'native' where the architecture allows)"
        )
    refused = [name for name, neutral in _NEUTRAL if getattr(params, name) != neutral]
    if params.logit_bias:
        refused.append("logit_bias")
    if refused:
        raise ValueError(
            f"{', '.join(refused)} {'is' if len(refused) == 1 else 'are'} not available for this model: "
            "engine type 'transformers' samples with temperature, top_p and top_k only"
        )


def request_kwargs(params: SamplingParams, vocab_size: int) -> dict[str, Any]:
    """The per-request processor arguments: every one always given, so no default of the engine applies."""
    if params.temperature == 0.0:  # greedy: the top token alone survives, whatever is sampled
        return {"temperature": 1.0, "top_k": 1, "top_p": 1.0}
    top_k = params.top_k if params.top_k > 0 else vocab_size
    return {"temperature": float(params.temperature), "top_k": int(top_k), "top_p": float(params.top_p)}


def generation_config(eos_token_ids: set[int], max_new_tokens: int) -> GenerationConfig:
    """Values other than the neutral ones, so transformers builds all three per-request processors;
    every request overrides them (request_kwargs)."""
    return GenerationConfig(
        do_sample=True,
        temperature=0.5,
        top_k=50,
        top_p=0.5,
        max_new_tokens=max_new_tokens,
        eos_token_id=sorted(eos_token_ids) or -1,
    )


def kv_bytes_per_token(model_config: Any, dtype: torch.dtype) -> int:
    """K and V for one token across every layer, as transformers sizes its pages."""
    text = model_config.get_text_config()
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * elem


def batching_config(
    config: EngineConfig, *, device: torch.device, bytes_per_token: int, max_model_len: int
) -> tuple[ContinuousBatchingConfig, int | None]:
    """transformers' batching settings from ours, and the KV bytes planned (None: it sizes from the GPU)."""
    kv_bytes: int | None = config.kv_cache_memory_bytes
    if kv_bytes is None and device.type == "cpu":
        kv_bytes = cpu_kv_budget(
            None,
            bytes_per_token=bytes_per_token,
            max_model_len=max_model_len,
            max_num_seqs=config.max_num_seqs,
            block_size=PAGE_SIZE,
        ).bytes
    num_blocks = max(1, kv_bytes // (bytes_per_token * PAGE_SIZE)) if kv_bytes is not None else None
    cb_config = ContinuousBatchingConfig(
        page_size=PAGE_SIZE,
        num_blocks=num_blocks,
        max_batch_tokens=config.max_num_batched_tokens,
        max_requests_per_batch=config.max_num_seqs,
        max_memory_percent=config.gpu_memory_utilization,
        allow_block_sharing=config.enable_prefix_caching,
        per_request_processors=True,
        seed=config.seed,
    )
    planned = num_blocks * PAGE_SIZE * bytes_per_token if num_blocks is not None else None
    return cb_config, planned
