"""quantization "int4": a GGUF's own 4-bit blocks, multiplied as they are, on CPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import inference.models.quantization.probe
from inference import EngineConfig, SamplingParams
from inference.models.layers.linear import Linear
from inference.models.loader.load import LoadedModel, load_model
from inference.models.loader.source import default_gguf_path
from inference.models.quantization.gguf.formats import GROUP, GGUFBlocks, Q4Blocks, parse_q4, read_blocks
from inference.models.quantization.int4 import Int4Method, int4_linear, pack_int4
from inference.models.quantization.setup import LinearPlan, choose_method, give_methods
from tests.inference.real_model import MAX_TOKENS, make_engine, prompts, worst_gap_to_fp32


def random_blocks(out_features: int, in_features: int, seed: int) -> Q4Blocks:
    rng = np.random.default_rng(seed)
    groups = in_features // GROUP
    return Q4Blocks.from_levels(
        rng.integers(0, 16, (out_features, in_features), dtype=np.uint8),
        rng.uniform(0.001, 0.02, (out_features, groups)).astype(np.float32),
        rng.normal(0, 0.05, (out_features, groups)).astype(np.float32),
    )


def test_q4_0_and_q4_1_blocks_decode_as_ggml_defines_them() -> None:
    levels = np.arange(32, dtype=np.uint8) % 16  # weights 0..15, 0..15 of one block
    nibbles = (levels[:16] | (levels[16:] << 4)).astype(np.uint8)
    d, m = np.float16(0.5), np.float16(-1.25)
    q4_0 = np.concatenate([np.frombuffer(d.tobytes(), np.uint8), nibbles])[None, :]
    q4_1 = np.concatenate([np.frombuffer(d.tobytes() + m.tobytes(), np.uint8), nibbles])[None, :]
    expected_0 = 0.5 * (levels.astype(np.float32) - 8)  # Q4_0: d * (q - 8)
    expected_1 = 0.5 * levels.astype(np.float32) - 1.25  # Q4_1: d * q + m
    np.testing.assert_array_equal(parse_q4(q4_0, "Q4_0").dequantize()[0], expected_0)
    np.testing.assert_array_equal(parse_q4(q4_1, "Q4_1").dequantize()[0], expected_1)


def test_int4_linear_multiplies_the_blocks_weights() -> None:
    blocks = random_blocks(96, 128, seed=0)
    x = torch.randn(5, 128).bfloat16()
    bias = torch.randn(96).bfloat16()
    out = int4_linear(x, pack_int4(blocks), bias)
    # The kernel holds scale and zero in bf16: the reference rounds them the same way.
    scale = torch.from_numpy(blocks.scale).bfloat16().float().numpy()
    zero = torch.from_numpy(blocks.zero).bfloat16().float().numpy()
    rounded = Q4Blocks(blocks.nibbles, scale, zero - 8.0 * scale)
    expected = F.linear(x.float(), torch.from_numpy(rounded.dequantize()), bias.float())
    assert out.dtype == torch.bfloat16 and out.shape == (5, 96)
    error = (out.float() - expected).norm() / expected.norm()
    assert error < 1e-2, f"relative error {error:.2e}"


def test_a_linear_refuses_blocks_of_another_shape() -> None:
    linear = Linear(64, 32, bias=False)
    with pytest.raises(ValueError, match=r"blocks of shape \(32, 32\) for a linear of shape \(32, 64\)"):
        choose_method(linear.weight.detach(), [random_blocks(32, 32, seed=1)], LinearPlan(int4=True))


PROJECTIONS = {  # fused module -> its checkpoint shards, in the order they are stacked
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attn.o_proj": ("self_attn.o_proj",),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "mlp.down_proj": ("mlp.down_proj",),
}


def test_fused_projections_take_their_shards_in_order(
    tiny_model_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loaded with every linear dense (no packing), so that methods can be chosen here from its blocks.
    monkeypatch.setattr(inference.models.quantization.probe, "packing_supported", lambda dtype: False)
    model = load_model(str(tiny_model_dir("qwen2")), dtype="bfloat16", device="cpu").model
    blocks: dict[str, Q4Blocks] = {}
    expected_weights: dict[str, torch.Tensor] = {}
    for layer, decoder_layer in enumerate(model.decoder_layers()):
        for fused, shards in PROJECTIONS.items():
            linear = decoder_layer.get_submodule(fused)
            assert isinstance(linear, Linear)
            sizes = getattr(linear, "shard_offsets", {"": (0, linear.out_features)}).values()
            parts = [
                random_blocks(size, linear.in_features, seed=layer * 10 + index)
                for index, (_, size) in enumerate(sizes)
            ]
            for shard, part in zip(shards, parts, strict=True):
                blocks[f"model.layers.{layer}.{shard}.weight"] = part
            expected_weights[f"{layer}.{fused}"] = torch.from_numpy(Q4Blocks.stack(parts).dequantize())
    counts = give_methods(model, LinearPlan(int4=True), GGUFBlocks(blocks, None))
    assert counts == {"int4": model.args.num_layers * len(PROJECTIONS), "dense": 1}  # + the tied head
    x = torch.randn(3, model.args.hidden_size).bfloat16()
    with torch.inference_mode():
        for layer, decoder_layer in enumerate(model.decoder_layers()):
            for fused in PROJECTIONS:
                linear = decoder_layer.get_submodule(fused)
                assert isinstance(linear, Linear) and isinstance(linear.method, Int4Method)
                inputs = (
                    x if linear.in_features == x.shape[1] else torch.randn(3, linear.in_features).bfloat16()
                )
                bias = None if linear.bias is None else linear.bias.float()
                expected = F.linear(inputs.float(), expected_weights[f"{layer}.{fused}"], bias)
                error = (linear(inputs).float() - expected).norm() / expected.norm()
                assert error < 1e-2, f"layer {layer} {fused}: relative error {error:.2e}"


def test_config_and_loader_refuse_what_cannot_be_4_bit(tiny_model_dir: Callable[[str], Path]) -> None:
    with pytest.raises(ValueError, match="quantization must be one of"):
        EngineConfig(quantization="awq")
    with pytest.raises(ValueError, match=r"needs a \.gguf model file"):
        load_model(str(tiny_model_dir("qwen2")), dtype="bfloat16", device="cpu", quantization="int4")
    with pytest.raises(ValueError, match="runs on CPU in bfloat16"):
        load_model("default", dtype="float32", device="cpu", quantization="int4")


def test_the_default_gguf_is_read_block_for_block(default_model_dir: Path) -> None:
    """Levels, scales and zeros reproduce the dequantized cache (which gguf-py wrote) for every Q4 tensor."""
    from safetensors import safe_open

    blocks = read_blocks(default_gguf_path(), num_heads=9, num_kv_heads=3).linears
    assert len(blocks) == 30 * 7  # q, k, v, o, gate, up, down of 30 layers; the Q8_0 embedding stays out
    with safe_open(str(default_model_dir / "model.safetensors"), framework="np") as f:
        for name in (
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.7.self_attn.k_proj.weight",
            "model.layers.29.mlp.down_proj.weight",
        ):
            np.testing.assert_allclose(blocks[name].dequantize(), f.get_tensor(name), rtol=1e-6, atol=1e-7)


@pytest.fixture(scope="module")
def q4_default(test_cache_dir: Path) -> LoadedModel:
    return load_model(
        "default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir, quantization="int4"
    )


@pytest.mark.slow
@torch.inference_mode()
def test_q4_greedy_picks_what_fp32_ranks_first(
    q4_default: LoadedModel, hf_reference: torch.nn.Module
) -> None:
    """As for bf16: teacher-forced through HF fp32 over the dequantized weights, every greedy token of the
    4-bit model is fp32's top token or within a near tie (measured worst: 0.112); and the projections take
    3.2x less memory."""
    linears = [m for m in q4_default.model.modules() if isinstance(m, Linear)]
    assert len(linears) == 30 * 4  # fused QKV, O, fused gate-up, down in every layer
    assert all(isinstance(m.method, Int4Method) and m.weight.numel() == 0 for m in linears)
    int4_bytes = sum(m.method.nbytes() for m in linears)
    bf16_bytes = sum(2 * m.in_features * m.out_features for m in linears)
    assert int4_bytes < 0.32 * bf16_bytes  # 4 bits + a bf16 scale and zero per 32 weights = 0.3125x
    # The embedding and the tied head (Q8_0 in the file) stay bf16: the whole model is ~0.55x.
    assert q4_default.model.weight_bytes() < 0.6 * 2 * (q4_default.num_params + 49152 * 576)
    all_prompts = prompts(q4_default.tokenizer)
    engine = make_engine(q4_default, dtype="bfloat16", quantization="int4")
    outputs = engine.generate(all_prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    worst = worst_gap_to_fp32(hf_reference, all_prompts, outputs)
    assert worst < 0.25, f"a 4-bit pick {worst:.3f} below fp32's top"
