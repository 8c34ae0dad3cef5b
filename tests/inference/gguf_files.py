"""Writing test GGUF files: the bundled tokenizer cut to a small vocabulary, and a tiny Hugging Face
checkpoint written back as llama.cpp lays it out (names, Q/K row order, experts stacked per layer)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize
from safetensors.numpy import load_file

from inference.models.loader import default_gguf_path


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
