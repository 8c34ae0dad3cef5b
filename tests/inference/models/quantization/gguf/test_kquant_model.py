"""End to end: the bundled model requantized to Q4_K_M's mix of types, served by the engine in bf16 with
its K-quant and Q8_0 blocks read as stored, answers greedily as transformers does in bf16 with the same
weights."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize
from transformers import AutoModelForCausalLM

from inference import SamplingParams
from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.gguf.convert import ensure_converted
from inference.models.kernels import build as kernel_build
from inference.models.layers.linear import Linear
from inference.models.loader.load import LoadedModel, load_model
from inference.models.loader.source import default_gguf_path
from inference.models.quantization.gguf.fused_layers import FusedDecode
from inference.models.quantization.gguf.layout import DecodeWeight, KQuantWeight
from inference.models.quantization.gguf.method import GGUFDecodeMethod
from tests.inference.kquant_files import quantize_iq4_xs, quantize_q4_k, quantize_q6_k, requantize_q4_k_m
from tests.inference.real_model import decode_chunks, make_engine, prompts, runner_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the block kernels need AVX512-BF16"),
]

TOKENS = 16


@pytest.mark.parametrize(
    ("kind", "quantizer"), [("Q4_K", quantize_q4_k), ("Q6_K", quantize_q6_k), ("IQ4_XS", quantize_iq4_xs)]
)
def test_the_tests_quantizer_writes_blocks_gguf_py_reads_back(kind: str, quantizer: object) -> None:
    weights = np.random.default_rng(0).normal(0, 0.05, (6, 512)).astype(np.float32)
    raw = quantizer(weights)  # type: ignore[operator]
    back = dequantize(raw, GGMLQuantizationType[kind]).reshape(weights.shape)
    step = np.abs(weights).max() / {"Q4_K": 7, "Q6_K": 31, "IQ4_XS": 7}[kind]
    assert np.abs(back - weights).max() <= step


@pytest.fixture(scope="module")
def q4_k_m_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("q4_k_m") / "smollm2-135m-q4_k_m.gguf"
    counts = requantize_q4_k_m(default_gguf_path(), target)
    # 576-wide rows are not whole super-blocks: only ffn_down (1536 wide) can be a K-quant in this model.
    assert counts == {"F32": 61, "Q8_0": 181, "Q4_K": 16, "Q6_K": 14}, counts
    return target


@pytest.fixture(scope="module")
def q4_k_m(q4_k_m_file: Path, test_cache_dir: Path) -> LoadedModel:
    return load_model(str(q4_k_m_file), dtype="bfloat16", device="cpu", cache_dir=test_cache_dir)


def greedy(loaded: LoadedModel) -> list[list[int]]:
    engine = make_engine(loaded, dtype="bfloat16", max_model_len=1024, kv_cache_memory_bytes=64 << 20)
    params = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)
    return [list(out.outputs[0].token_ids) for out in engine.generate(prompts(loaded.tokenizer), params)]


@torch.inference_mode()
def transformers_bf16(model_dir: Path, all_prompts: list[list[int]]) -> list[list[int]]:
    """transformers' own bf16 model over the same dequantized weights, greedy, never stopping early."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = None  # as ignore_eos: an EOS pick is a token like any other
    replies = []
    for prompt in all_prompts:
        ids = torch.tensor([prompt])
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=TOKENS, pad_token_id=0
        )
        replies.append(out[0, len(prompt) :].tolist())
    return replies


@torch.inference_mode()
def test_a_q4_k_m_file_reads_its_blocks_as_stored_and_answers_like_its_bf16_reference(
    q4_k_m: LoadedModel, q4_k_m_file: Path, test_cache_dir: Path
) -> None:
    """Every projection reads its file blocks for decode (Q4_K or Q6_K down projections, Q8_0 for the
    rest); the 8 prompts' (4 plain, 4 chat-templated) first 16 greedy tokens match transformers' bf16 model
    of the same weights on at least 6. Measured with the default 14-bit activations for the K-quant rows,
    decoding through the fused layers: 6 of 8 (the others part at tokens 4 and 14; 7 through the modules,
    whose attention sums in another order); with kquant_activations "int8" (llama.cpp's) 6, with "bf16"
    (the module path) 8."""
    methods = {name: m.method for name, m in q4_k_m.model.named_modules() if isinstance(m, Linear)}
    assert len(methods) == 30 * 4 and all(isinstance(m, GGUFDecodeMethod) for m in methods.values())
    kquant = {
        name: part.type_id
        for name, method in methods.items()
        for part in method.parts  # type: ignore[attr-defined]
        if isinstance(part, KQuantWeight)
    }
    assert set(kquant) == {f"model.layers.{i}.mlp.down_proj" for i in range(30)}
    assert sorted(set(kquant.values())) == [12, 14]  # Q4_K and Q6_K
    q8 = methods["model.layers.0.self_attn.qkv_proj"].parts  # type: ignore[attr-defined]
    assert len(q8) == 1 and isinstance(q8[0], DecodeWeight) and q8[0].levels.dtype == torch.int8
    all_prompts = prompts(q4_k_m.tokenizer)
    ours = greedy(q4_k_m)  # decoding rows through decode_layers (the test above)
    reference = transformers_bf16(ensure_converted(q4_k_m_file, test_cache_dir), all_prompts)
    agree = sum(a == b for a, b in zip(ours, reference, strict=True))
    assert agree >= 6, f"{agree}/8 prompts agree with transformers in bf16 for {TOKENS} tokens"


def test_its_decoding_rows_run_the_native_layers_on_every_type_and_agree_with_the_modules(
    q4_k_m: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Q4_K_M file's mix (Q8_0 projections, Q4_K and Q6_K down projections) runs its decoding rows through
    decode_layers, reading each matrix with the kernel the module path uses for it. Only attention's
    summation order differs, so 3 rows' logits stay within a few bf16 steps of the modules'."""
    engine = make_engine(q4_k_m, dtype="bfloat16", max_num_seqs=3)
    runner = runner_of(engine)
    fused = runner.fused_decode
    assert fused is not None and sorted(set(fused.kinds)) == [0, 12, 14]  # (d, m) blocks, Q4_K, Q6_K
    chunks = decode_chunks(engine, 3, steps=8)
    native = runner.execute(chunks).last
    runner.fused_decode = None
    modules = runner.execute(chunks).last
    runner.fused_decode = fused
    assert (native - modules).abs().max().item() < 1.0
    picks = native.argmax(-1)
    below_top = modules.max(-1).values - modules.gather(1, picks[:, None]).squeeze(1)
    assert below_top.max().item() < 0.5
    # K-quant rows with bf16 activations take the module path (decode_layers has only the integer kernels).
    model = q4_k_m.model
    assert isinstance(model, DecoderForCausalLM)
    bf16_kernel = replace(fused.kernel, activations="bf16")
    for module in model.modules():
        if isinstance(module, Linear) and isinstance(module.method, GGUFDecodeMethod):
            monkeypatch.setattr(module.method, "kernel", bf16_kernel)
    assert FusedDecode.build(model) is None


@pytest.fixture(scope="module")
def iq4_xs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("iq4_xs") / "smollm2-135m-iq4_xs.gguf"
    counts = requantize_q4_k_m(default_gguf_path(), target, mix="IQ4_XS")
    assert counts == {"F32": 61, "Q8_0": 181, "IQ4_XS": 30}, counts  # every 1536-wide ffn_down
    return target


@torch.inference_mode()
def test_an_iq4_xs_file_reads_its_blocks_as_stored_and_answers_like_its_dense_weights(
    iq4_xs_file: Path, test_cache_dir: Path
) -> None:
    """IQ4_XS (4.25 bits per weight, a non-linear table) read as stored: every down projection takes its
    blocks, and the 8 prompts' first 16 greedy tokens agree with transformers' bf16 model of the same
    weights at least as often as our own engine does with the dense bf16 weights (no block kernels). This
    file's coarse weights leave many near-ties: measured 5 of 8 through the blocks, 4 dense."""
    loaded = load_model(str(iq4_xs_file), dtype="bfloat16", device="cpu", cache_dir=test_cache_dir)
    downs = [m.method for name, m in loaded.model.named_modules() if name.endswith("mlp.down_proj")]
    assert len(downs) == 30 and all(isinstance(m, GGUFDecodeMethod) for m in downs)
    assert {part.type_id for m in downs for part in m.parts} == {23}  # type: ignore[attr-defined]
    reference = transformers_bf16(ensure_converted(iq4_xs_file, test_cache_dir), prompts(loaded.tokenizer))
    blocks = sum(a == b for a, b in zip(greedy(loaded), reference, strict=True))
    dense_model = load_model(
        str(iq4_xs_file), dtype="bfloat16", device="cpu", cache_dir=test_cache_dir, gguf_kernels=False
    )
    dense = sum(a == b for a, b in zip(greedy(dense_model), reference, strict=True))
    assert blocks >= max(dense, 4), f"{blocks}/8 through the blocks, {dense}/8 dense"
