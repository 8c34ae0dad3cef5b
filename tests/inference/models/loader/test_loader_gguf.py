"""GGUF conversion for each supported architecture, on tiny synthetic GGUF files.

The tokenizer metadata is copied from the bundled SmolLM2 GGUF; the weights are random F32. Converted
weights must equal what transformers' own GGUF loader produces (which knows llama.cpp's Q/K permutation),
and our model loaded straight from the .gguf must match HF's model loaded from the converted directory.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from inference.models.loader.load import load_model
from tests.inference.all_logits import logits
from tests.inference.gguf_files import add_tokenizer

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 64, 4, 2, 128, 2
VOCAB = 1024  # a prefix of SmolLM2's byte-level BPE: every byte stays encodable, conversion stays fast


def write_tiny_gguf(
    path: Path,
    arch: str,
    *,
    qkv_bias: bool,
    qk_norm: bool,
    tied: bool,
    rope_freqs: np.ndarray | None = None,
    quantize: bool = False,
) -> None:
    from gguf import GGUFWriter

    head_dim = HIDDEN // HEADS
    w = GGUFWriter(str(path), arch)
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    add_tokenizer(w, VOCAB)
    rng = np.random.default_rng(0)

    def tensor(name: str, *shape: int) -> None:
        value = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        if quantize and len(shape) == 2:
            from gguf import GGMLQuantizationType
            from gguf.quants import quantize as quantize_blocks

            w.add_tensor(
                name, quantize_blocks(value, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0
            )
        else:
            w.add_tensor(name, value)

    tensor("token_embd.weight", VOCAB, HIDDEN)
    tensor("output_norm.weight", HIDDEN)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    if not tied:
        tensor("output.weight", VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", HIDDEN)
        tensor(p + "ffn_norm.weight", HIDDEN)
        tensor(p + "attn_q.weight", HEADS * head_dim, HIDDEN)
        tensor(p + "attn_k.weight", KV_HEADS * head_dim, HIDDEN)
        tensor(p + "attn_v.weight", KV_HEADS * head_dim, HIDDEN)
        if qkv_bias:
            tensor(p + "attn_q.bias", HEADS * head_dim)
            tensor(p + "attn_k.bias", KV_HEADS * head_dim)
            tensor(p + "attn_v.bias", KV_HEADS * head_dim)
        if qk_norm:
            tensor(p + "attn_q_norm.weight", head_dim)
            tensor(p + "attn_k_norm.weight", head_dim)
        tensor(p + "attn_output.weight", HIDDEN, HEADS * head_dim)
        tensor(p + "ffn_gate.weight", FFN, HIDDEN)
        tensor(p + "ffn_up.weight", FFN, HIDDEN)
        tensor(p + "ffn_down.weight", HIDDEN, FFN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize(
    ("arch", "expected", "options"),
    [
        ("llama", "LlamaForCausalLM", {"qkv_bias": False, "qk_norm": False, "tied": True}),
        ("qwen2", "Qwen2ForCausalLM", {"qkv_bias": True, "qk_norm": False, "tied": True}),
        ("qwen3", "Qwen3ForCausalLM", {"qkv_bias": False, "qk_norm": True, "tied": False}),
    ],
)
def test_tiny_gguf_converts_like_transformers(
    tmp_path: Path, arch: str, expected: str, options: dict[str, bool]
) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    gguf_path = tmp_path / f"tiny-{arch}.gguf"
    write_tiny_gguf(
        gguf_path, arch, qkv_bias=options["qkv_bias"], qk_norm=options["qk_norm"], tied=options["tied"]
    )
    loaded = load_model(str(gguf_path), dtype="float32", device="cpu", cache_dir=tmp_path / "cache")
    assert loaded.architecture == expected
    assert json.loads((loaded.model_dir / "config.json").read_text())["head_dim"] == HIDDEN // HEADS

    reference = AutoModelForCausalLM.from_pretrained(loaded.model_dir, dtype=torch.float32).eval()
    theirs = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=reference)["tensors"]
    ours = load_file(str(loaded.model_dir / "model.safetensors"))
    assert set(ours) == set(theirs)
    for name, value in ours.items():
        assert torch.equal(value, theirs[name].to(value.dtype)), name

    ids = loaded.tokenizer.encode("A tiny model still needs correct rotary layouts.")
    with torch.no_grad():
        expected_logits = reference(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(logits(loaded, ids), expected_logits, atol=1e-4, rtol=0)


def llama_cpp_rope_factors(head_dim: int, factor: float) -> np.ndarray:
    """What llama.cpp's convert_hf_to_gguf writes as rope_freqs for a Llama 3.x rope_scaling block."""
    freqs = 1.0 / (10000.0 ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    old_len, low, high = 8192, 1.0, 4.0
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_len / high:
            out.append(1.0)
        elif wavelen > old_len / low:
            out.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def test_llama3_rope_freqs_become_llama3_rope_parameters(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    gguf_path = tmp_path / "tiny-llama3.gguf"
    factors = llama_cpp_rope_factors(HIDDEN // HEADS, 32.0)
    # Kept, scaled and smoothly interpolated frequencies are all present at this head_dim.
    assert factors.min() == 1.0 and factors.max() == 32.0 and ((factors > 1) & (factors < 32)).any()
    write_tiny_gguf(gguf_path, "llama", qkv_bias=False, qk_norm=False, tied=True, rope_freqs=factors)
    loaded = load_model(str(gguf_path), dtype="float32", device="cpu", cache_dir=tmp_path / "cache")
    rope = json.loads((loaded.model_dir / "config.json").read_text())["rope_parameters"]
    assert rope["rope_type"] == "llama3" and rope["factor"] == 32.0
    assert rope["original_max_position_embeddings"] == 8192

    reference = AutoModelForCausalLM.from_pretrained(loaded.model_dir, dtype=torch.float32).eval()
    ids = list(range(3, 203))  # long enough for every frequency band to matter
    with torch.no_grad():
        expected_logits = reference(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(logits(loaded, ids), expected_logits, atol=1e-4, rtol=0)


def test_unknown_rope_freqs_are_refused(tmp_path: Path) -> None:
    gguf_path = tmp_path / "tiny-odd-rope.gguf"
    odd = np.linspace(1.0, 3.0, HIDDEN // HEADS // 2, dtype=np.float32)
    write_tiny_gguf(gguf_path, "llama", qkv_bias=False, qk_norm=False, tied=True, rope_freqs=odd)
    with pytest.raises(ValueError, match="rope_freqs"):
        load_model(str(gguf_path), dtype="float32", device="cpu", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("large", [False, True])
def test_quantized_weights_dequantize_to_fp32_or_fp16_by_model_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from inference.models.gguf import convert as gguf_convert

    if large:
        monkeypatch.setattr(gguf_convert, "FP32_MAX_ELEMENTS", 0)
    gguf_path = tmp_path / "tiny-q8.gguf"
    write_tiny_gguf(gguf_path, "llama", qkv_bias=False, qk_norm=False, tied=True, quantize=True)
    model_dir = gguf_convert.ensure_converted(gguf_path, tmp_path / "cache")
    ours = load_file(str(model_dir / "model.safetensors"))
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    theirs = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=reference)["tensors"]
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    assert ours[q_proj].dtype == (torch.float16 if large else torch.float32)
    assert ours["model.norm.weight"].dtype == torch.float32  # unquantized tensors keep their type
    for name, value in ours.items():
        assert torch.equal(value, theirs[name].to(value.dtype)), name
