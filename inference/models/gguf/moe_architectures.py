"""Hugging Face configs for mixture-of-experts GGUFs: the expert settings transformers' GGUF config reader
leaves out, Mixtral (which llama.cpp writes as a llama file with experts), and whole configs for the
architectures that reader does not know (OLMoE)."""

from __future__ import annotations

from typing import Any

from inference.models.gguf.reader import GGUFFile


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


OWN_CONFIGS = {"olmoe": olmoe_config}
