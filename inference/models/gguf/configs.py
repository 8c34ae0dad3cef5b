"""Hugging Face configs for GGUFs: the settings transformers' GGUF config reader leaves out or gets wrong
(Gemma's soft caps, layer pattern, attention scale and per-layer-type rope; Phi-3's LongRoPE; the expert
widths of mixture-of-experts files, and Mixtral, which llama.cpp writes as a llama file with experts), and
whole configs for the architectures that reader does not know (OLMoE).

Some settings are not in the file at all: llama.cpp derives them, and so do we the same way. Gemma's
attention scale is 1/sqrt(head_dim) except for the 27B models (1/sqrt(hidden / heads)), recognised by their
layer count; Gemma 2 alternates local and global layers starting with a local one, Gemma 3 has five local
layers per global one, unless the file carries an explicit sliding_window_pattern.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inference.models.gguf.reader import GGUFFile

_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
_GEMMA_LOCAL_PERIOD = {"gemma2": 2, "gemma3": 6}


def gemma_config(gguf: GGUFFile, config: Any) -> Any:
    arch = gguf.architecture
    layers, heads, hidden = config.num_hidden_layers, config.num_attention_heads, config.hidden_size
    head_dim = int(gguf.field(f"{arch}.attention.key_length") or hidden // heads)
    config.head_dim = head_dim
    config.query_pre_attn_scalar = hidden // heads if layers == _GEMMA_27B_LAYERS[arch] else head_dim
    window = gguf.field(f"{arch}.attention.sliding_window")
    pattern = gguf.field(f"{arch}.attention.sliding_window_pattern")
    if not window:
        local = [False] * layers
    elif pattern is not None:
        local = [bool(p) for p in pattern]
    else:
        period = _GEMMA_LOCAL_PERIOD[arch]
        local = [(index + 1) % period != 0 for index in range(layers)]
    config.sliding_window = int(window) if window else None
    config.layer_types = ["sliding_attention" if is_local else "full_attention" for is_local in local]
    final_cap = gguf.field(f"{arch}.final_logit_softcapping")
    global_rope: dict[str, Any] = {"rope_type": "default"}
    if arch == "gemma2":
        attention_cap = gguf.field(f"{arch}.attn_logit_softcapping")
        if attention_cap is not None:
            config.attn_logit_softcapping = float(attention_cap)
        if final_cap is not None:
            config.final_logit_softcapping = float(final_cap)
        global_rope["rope_theta"] = float(gguf.field(f"{arch}.rope.freq_base", 1e4))
        config.rope_parameters = global_rope
        return config
    config.attn_logit_softcapping = None
    config.final_logit_softcapping = float(final_cap) if final_cap else None
    global_rope["rope_theta"] = float(gguf.field(f"{arch}.rope.freq_base", 1e6))
    factor = gguf.field(f"{arch}.rope.scaling.factor")
    if gguf.field(f"{arch}.rope.scaling.type") == "linear" and factor:
        global_rope.update(rope_type="linear", factor=float(factor))
    local_theta = float(gguf.field(f"{arch}.rope.freq_base_swa", 1e4))  # llama.cpp's fixed local base
    config.rope_parameters = {
        "full_attention": global_rope,
        "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
    }
    return config


def phi3_config(gguf: GGUFFile, config: Any) -> Any:
    theta = float(gguf.field("phi3.rope.freq_base", 1e4))
    original = int(gguf.field("phi3.rope.scaling.original_context_length") or config.max_position_embeddings)
    config.original_max_position_embeddings = original
    config.pad_token_id = gguf.field("tokenizer.ggml.padding_token_id")  # not Phi3Config's 32000 default
    window = gguf.field("phi3.attention.sliding_window")
    config.sliding_window = int(window) if window else None  # llama.cpp writes 0 for "none" (Phi-4)
    long, short = gguf.tensor("rope_factors_long.weight"), gguf.tensor("rope_factors_short.weight")
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 1.0}
    if long is not None and short is not None:
        rope.update(
            rope_type="longrope",
            long_factor=[float(x) for x in np.asarray(long.data, dtype=np.float32).reshape(-1)],
            short_factor=[float(x) for x in np.asarray(short.data, dtype=np.float32).reshape(-1)],
            original_max_position_embeddings=original,
        )
    rotated = gguf.field("phi3.rope.dimension_count")
    head_dim = config.hidden_size // config.num_attention_heads
    if rotated and int(rotated) != head_dim:  # Phi-4-mini rotates part of each head; say so, not guess
        rope["partial_rotary_factor"] = int(rotated) / head_dim
    config.rope_parameters = rope
    return config


def moe_config(gguf: GGUFFile, config: Any) -> Any:
    """The expert settings transformers' GGUF config reader leaves out (expert widths), and Mixtral, which
    llama.cpp writes as a llama file with experts."""
    arch = gguf.architecture
    experts = gguf.field(f"{arch}.expert_count")
    if not experts:
        return config
    expert_width = gguf.field(f"{arch}.expert_feed_forward_length")
    if arch == "llama":
        from transformers import MixtralConfig

        values = {k: v for k, v in config.to_dict().items() if k not in ("model_type", "architectures")}
        config = MixtralConfig(**values)
        config.architectures = ["MixtralForCausalLM"]
        config.num_local_experts = int(experts)
        if expert_width:
            config.intermediate_size = int(expert_width)
    else:
        config.num_experts = int(experts)
        if expert_width:
            config.moe_intermediate_size = int(expert_width)
        shared = gguf.field(f"{arch}.expert_shared_feed_forward_length")
        if shared:
            config.shared_expert_intermediate_size = int(shared)
        # llama.cpp makes every layer sparse and (qwen2moe) leaves the top-k weights unnormalised.
        config.mlp_only_layers, config.decoder_sparse_step = [], 1
        config.norm_topk_prob = arch != "qwen2moe"
    config.num_experts_per_tok = int(gguf.field(f"{arch}.expert_used_count"))
    return config


def olmoe_config(gguf: GGUFFile) -> Any:
    """OLMoE's config from llama.cpp's olmoe metadata (every layer sparse, top-k weights unnormalised)."""
    from transformers import OlmoeConfig

    def number(key: str, default: Any = None) -> Any:
        value = gguf.field(f"olmoe.{key}", default)
        if value is None:
            raise ValueError(f"{gguf.path.name}: GGUF metadata olmoe.{key} is missing")
        return value

    heads = int(number("attention.head_count"))
    clamp = gguf.field("olmoe.attention.clamp_kqv")
    experts_width = number("expert_feed_forward_length", number("feed_forward_length"))
    config = OlmoeConfig(
        vocab_size=len(gguf.field("tokenizer.ggml.tokens", [])) or 50304,
        hidden_size=int(number("embedding_length")),
        intermediate_size=int(experts_width),
        num_hidden_layers=int(number("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(number("attention.head_count_kv", heads)),
        rms_norm_eps=float(number("attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(number("context_length", 4096)),
        rope_parameters={"rope_type": "default", "rope_theta": float(number("rope.freq_base", 10000.0))},
        num_experts=int(number("expert_count")),
        num_experts_per_tok=int(number("expert_used_count")),
        norm_topk_prob=False,
        clip_qkv=float(clamp) if clamp else None,
        bos_token_id=gguf.field("tokenizer.ggml.bos_token_id"),
        eos_token_id=gguf.field("tokenizer.ggml.eos_token_id"),
        pad_token_id=gguf.field("tokenizer.ggml.padding_token_id"),
    )
    config.architectures = ["OlmoeForCausalLM"]
    return config
