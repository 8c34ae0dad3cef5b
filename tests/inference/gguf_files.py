"""Writing test GGUF files: the bundled tokenizer cut to a small vocabulary, and a tiny Hugging Face
checkpoint written back as llama.cpp lays it out (names, Q/K row order, experts stacked per layer, Gemma's
norm offset, Phi-3's fused projections)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, RopeScalingType
from gguf.quants import quantize
from safetensors.numpy import load_file

from inference.models.loader.source import default_gguf_path


@functools.cache
def tokenizer_metadata(vocab: int) -> dict[str, Any]:
    """The bundled tokenizer cut to `vocab` tokens, keeping only the merges whose parts and result survive."""
    from gguf import GGUFReader

    source = GGUFReader(default_gguf_path())

    def field(key: str) -> Any:
        value = source.get_field(key)
        if value is None:
            raise KeyError(key)
        return value.contents()

    tokens = list(field("tokenizer.ggml.tokens"))[:vocab]
    kept = set(tokens)
    merges = [m for m in field("tokenizer.ggml.merges") if {*m.split(" "), m.replace(" ", "")} <= kept]
    return {
        "model": str(field("tokenizer.ggml.model")),
        "pre": str(field("tokenizer.ggml.pre")),
        "tokens": tokens,
        "token_type": list(field("tokenizer.ggml.token_type"))[:vocab],
        "merges": merges,
        "chat_template": str(field("tokenizer.chat_template")),
    }


def add_tokenizer(writer: GGUFWriter, vocab: int) -> None:
    meta = tokenizer_metadata(vocab)
    writer.add_tokenizer_model(meta["model"])
    writer.add_tokenizer_pre(meta["pre"])
    writer.add_token_list(meta["tokens"])
    writer.add_token_types(meta["token_type"])
    writer.add_token_merges(meta["merges"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(meta["chat_template"])


_LAYER = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate": "ffn_gate_inp",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
    "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp",
    "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
}
_EXPERTS = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}
_MIXTRAL = {"block_sparse_moe": "mlp", "w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


def _permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Q/K row interleave (what its llama converter writes; the loader undoes it)."""
    half = rows.shape[0] // heads // 2
    return rows.reshape(heads, 2, half, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def write_moe_gguf(hf_dir: Path, path: Path, arch: str, *, experts_type: str = "F32") -> None:
    """The tiny MoE checkpoint in `hf_dir` as a GGUF of llama.cpp architecture `arch` (llama = Mixtral),
    experts stored as `experts_type` (F32 or Q8_0), everything else F32."""
    config = json.loads((hf_dir / "config.json").read_text())
    tensors: dict[str, np.ndarray] = {}
    for name, value in load_file(str(hf_dir / "model.safetensors")).items():
        for theirs, ours in _MIXTRAL.items():
            name = name.replace(f".{theirs}.", f".{ours}.")
        tensors[name] = value.astype(np.float32)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    experts = config.get("num_local_experts") or config["num_experts"]
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(config.get("rope_theta") or config["rope_parameters"]["rope_theta"]))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_expert_count(experts)
    writer.add_expert_used_count(config["num_experts_per_tok"])
    if "moe_intermediate_size" in config:
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    if config.get("clip_qkv"):
        writer.add_clamp_kqv(config["clip_qkv"])
    if config.get("shared_expert_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    add_tokenizer(writer, config["vocab_size"])
    writer.add_tensor("token_embd.weight", tensors.pop("model.embed_tokens.weight"))
    writer.add_tensor("output_norm.weight", tensors.pop("model.norm.weight"))
    if "lm_head.weight" in tensors:
        writer.add_tensor("output.weight", tensors.pop("lm_head.weight"))
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        for ours, gguf_name in _LAYER.items():
            for kind in ("weight", "bias"):
                key = f"{prefix}{ours}.{kind}"
                if key not in tensors:
                    continue
                value = tensors.pop(key)
                if arch == "llama" and ours in ("self_attn.q_proj", "self_attn.k_proj"):
                    value = _permute(value, heads if ours.endswith("q_proj") else kv_heads)
                if gguf_name == "ffn_gate_inp_shexp":
                    value = value.reshape(-1)
                writer.add_tensor(f"blk.{layer}.{gguf_name}.{kind}", np.ascontiguousarray(value))
        for projection, gguf_name in _EXPERTS.items():
            stacked = np.stack(
                [tensors.pop(f"{prefix}mlp.experts.{e}.{projection}.weight") for e in range(experts)]
            )
            if experts_type == "Q8_0":
                raw = quantize(stacked, GGMLQuantizationType.Q8_0)
                writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", raw, raw_dtype=GGMLQuantizationType.Q8_0)
            else:
                writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", stacked)
    if tensors:
        raise ValueError(f"not written: {sorted(tensors)[:4]}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# Hugging Face layer module -> llama.cpp tensor, where Gemma and Phi-3 differ from the table above.
_DENSE_LAYER = {
    "gemma": {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "post_attention_norm",
        "pre_feedforward_layernorm": "ffn_norm",
        "post_feedforward_layernorm": "post_ffw_norm",
    },
    "phi3": {"self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"},
}
_PROJECTIONS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def write_dense_gguf(
    hf_dir: Path,
    path: Path,
    arch: str,
    *,
    projections_type: str = "F32",
    tokenizer: Callable[[GGUFWriter, int], None] = add_tokenizer,
) -> None:
    """The tiny Gemma 2 / Gemma 3 / Phi-3 checkpoint in `hf_dir` as llama.cpp's converter writes it (norms
    as 1 + w for Gemma, Phi-3's projections fused, LongRoPE factors as tensors), the projections stored as
    `projections_type` (F32 or Q8_0), everything else F32; `tokenizer` writes the vocabulary."""
    config = json.loads((hf_dir / "config.json").read_text())
    tensors = {k: v.astype(np.float32) for k, v in load_file(str(hf_dir / "model.safetensors")).items()}
    gemma = arch.startswith("gemma")
    names = {**_LAYER, **_PROJECTIONS, **_DENSE_LAYER["gemma" if gemma else arch]}
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config["rope_parameters"]
    if gemma:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_sliding_window(config["sliding_window"])
        if config.get("final_logit_softcapping"):
            writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
        tensors.pop("lm_head.weight", None)  # llama.cpp's Gemma 2 head is always the embedding
    if arch == "gemma3":
        full, local = rope["full_attention"], rope["sliding_attention"]
        writer.add_rope_freq_base(full["rope_theta"])
        writer.add_rope_freq_base_swa(local["rope_theta"])
        if full.get("rope_type") == "linear":
            writer.add_rope_scaling_type(RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(full["factor"])
    if arch == "phi3":
        original = rope["original_max_position_embeddings"]
        writer.add_rope_scaling_orig_ctx_len(original)
        writer.add_rope_dimension_count(head_dim)
        writer.add_rope_freq_base(rope["rope_theta"])
        writer.add_sliding_window(config.get("sliding_window") or 0)
        scale = config["max_position_embeddings"] / original
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)))
        writer.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
        writer.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))
    tokenizer(writer, config["vocab_size"])

    def add(gguf_name: str, value: np.ndarray) -> None:
        if gemma and gguf_name.endswith("norm.weight"):
            value = value + np.float32(1.0)
        if projections_type == "Q8_0" and gguf_name.split(".")[-2] in {*_PROJECTIONS.values(), "attn_qkv"}:
            raw = quantize(value, GGMLQuantizationType.Q8_0)
            writer.add_tensor(gguf_name, raw, raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(gguf_name, np.ascontiguousarray(value))

    add("token_embd.weight", tensors.pop("model.embed_tokens.weight"))
    add("output_norm.weight", tensors.pop("model.norm.weight"))
    if "lm_head.weight" in tensors:
        add("output.weight", tensors.pop("lm_head.weight"))
    for layer in range(config["num_hidden_layers"]):
        for ours, gguf_name in names.items():
            for kind in ("weight", "bias"):
                key = f"model.layers.{layer}.{ours}.{kind}"
                if key in tensors:
                    add(f"blk.{layer}.{gguf_name}.{kind}", tensors.pop(key))
    if tensors:
        raise ValueError(f"not written: {sorted(tensors)[:4]}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
