"""bf16 on CPU: oneDNN-prepacked linears change speed, never results; the dense bf16 path the loader picks
gives each row the same bits at any batch size; bf16 greedy stays on fp32's choices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import inference.models.quantization.probe
from inference import SamplingParams
from inference.device import fast_bf16_cpu, resolve_dtype
from inference.models.layers.linear import Linear
from inference.models.loader.load import LoadedModel, load_model
from inference.models.quantization.amx_tiles import TileMethod, cpu_has_amx
from inference.models.quantization.base import DENSE
from inference.models.quantization.onednn import PackedMethod, pack_weight, packed_linear, packing_supported
from inference.models.quantization.setup import LinearPlan, choose_method
from tests.inference.models.architectures.test_models import make_runner, run_schedule
from tests.inference.real_model import MAX_TOKENS, make_engine, prompts, worst_gap_to_fp32

# Packing is only used where it is exact and fast; elsewhere these tests check that it stays off.
PACKS = packing_supported(torch.bfloat16)
# oneDNN's bf16 weight reorder itself needs AVX512BW/VL/DQ (or AVX-NE-CONVERT): on an AVX2-only CPU the ops
# raise, and the loader, which packs only where PACKS, never calls them.
reorders_bf16 = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX512", "AMX"),
    reason="oneDNN's bf16 reorder needs AVX512",
)


def test_packing_only_for_bf16_on_cpus_that_multiply_it_natively() -> None:
    assert not packing_supported(torch.float32)
    assert not packing_supported(torch.float16)
    if not fast_bf16_cpu():
        assert not PACKS


def test_auto_dtype_on_cpu_follows_native_bf16() -> None:
    expected = torch.bfloat16 if fast_bf16_cpu() else torch.float32
    assert resolve_dtype("auto", torch.device("cpu")) == expected
    assert resolve_dtype("float32", torch.device("cpu")) == torch.float32


@reorders_bf16
@pytest.mark.parametrize("shape", [(1, 96), (7, 96), (3, 5, 96)])
def test_packed_linear_is_bitwise_plain_bf16(shape: tuple[int, ...]) -> None:
    # The ops run on every AVX512 CPU; the loader only uses them where they are also fast (PACKS).
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(200, 96, generator=gen).bfloat16()
    bias = torch.randn(200, generator=gen).bfloat16()
    x = torch.randn(*shape, generator=gen).bfloat16()
    out = packed_linear(x, pack_weight(weight), bias)
    assert out.shape == (*shape[:-1], 200)
    assert torch.equal(out, F.linear(x, weight, bias))


@reorders_bf16
def test_a_packed_linear_drops_the_dense_weight() -> None:
    layer = Linear(96, 40, bias=False).bfloat16()
    x = torch.randn(4, 96).bfloat16()
    before = layer(x)
    assert choose_method(layer.weight.detach(), None, LinearPlan()) is DENSE
    layer.use(choose_method(layer.weight.detach(), None, LinearPlan(pack=True)))
    assert layer.weight.numel() == 0 and isinstance(layer.method, PackedMethod)
    assert torch.equal(layer(x), before)


@pytest.mark.skipif(not PACKS, reason="this CPU lacks native bf16: the loader keeps bf16 linears dense")
def test_the_dense_bf16_path_gives_a_row_the_same_bits_at_any_batch_size(
    tiny_model_dir: Callable[[str], Path],
) -> None:
    """What the loader picks for bf16 linears (our AMX tiles where the CPU has AMX, else oneDNN's prepacked
    AVX512-BF16 kernels): rows 1 to 64 and a prompt's 300, cut anywhere, equal the 300-row call's rows."""
    loaded = load_model(str(tiny_model_dir("llama-rope-linear-bias")), dtype="bfloat16", device="cpu")
    expected = TileMethod if cpu_has_amx() else PackedMethod
    linears = [m for m in loaded.model.modules() if isinstance(m, Linear)]
    assert linears and all(isinstance(m.method, expected) for m in linears)
    gen = torch.Generator().manual_seed(5)
    for layer in linears:
        x = torch.randn(300, layer.in_features, generator=gen).bfloat16()
        with torch.inference_mode():
            whole = layer(x)
            for rows in range(1, 65):
                for start in sorted({0, 300 - rows}):
                    assert torch.equal(layer(x[start : start + rows]), whole[start : start + rows]), rows


@pytest.mark.parametrize("name", ["llama-rope-llama3", "llama-rope-linear-bias", "qwen3"])
def test_loading_in_bf16_packs_without_changing_logits(
    tiny_model_dir: Callable[[str], Path], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tied and untied heads, with and without biases: the packed model's logits equal the plain bf16 ones.
    (On AMX the loader tiles instead (test_tile_linear); here the oneDNN packing itself is checked.)"""
    model_dir = tiny_model_dir(name)
    monkeypatch.setattr(inference.models.quantization.probe, "load_tiles", lambda *args, **kwargs: False)
    packed = load_model(str(model_dir), dtype="bfloat16", device="cpu")
    monkeypatch.setattr(inference.models.quantization.probe, "packing_supported", lambda dtype: False)
    plain = load_model(str(model_dir), dtype="bfloat16", device="cpu")
    linears = [m for m in packed.model.modules() if isinstance(m, Linear)]
    assert linears and all(isinstance(m.method, PackedMethod) == PACKS for m in linears)
    assert all(m.method is DENSE for m in plain.model.modules() if isinstance(m, Linear))
    assert packed.num_params == plain.num_params
    # Packed weights are not parameters, but they still count toward the model's memory.
    tied_head_copy = 512 * 64 * 2 if PACKS and packed.model.lm_head is None else 0
    assert packed.model.weight_bytes() == plain.model.weight_bytes() + tied_head_copy

    gen = torch.Generator().manual_seed(1)
    seqs = {k: torch.randint(0, 512, (n,), generator=gen).tolist() for k, n in (("a", 72), ("b", 22))}
    steps = [{"a": 50, "b": 20}, {"a": 20, "b": 1}, {"a": 1, "b": 1}]
    ours = run_schedule(make_runner(packed, kv_bytes=4 << 20), seqs, steps)
    reference = run_schedule(make_runner(plain, kv_bytes=4 << 20), seqs, steps)
    for key in seqs:
        assert torch.equal(ours[key], reference[key])


@pytest.fixture(scope="module")
def bf16_default(default_model_dir: Path) -> LoadedModel:
    return load_model(str(default_model_dir), dtype="bfloat16", device="cpu")


@pytest.mark.slow
@torch.inference_mode()
def test_bf16_greedy_picks_what_fp32_ranks_first(
    bf16_default: LoadedModel, hf_reference: torch.nn.Module
) -> None:
    """Teacher-forced through HF in fp32, every bf16 greedy token is fp32's top token or within a near tie.

    bf16 may break a near tie the other way (then the texts differ from there on), never pick a token
    fp32 clearly ranks lower. Measured worst gap on these prompts: 0.160 logits (2026-11-30).
    """
    # The packed linears are not parameters but are most of the memory: 134.5M bf16 weights plus the tied
    # head's packed copy (49152 x 576) is ~325 MB; counting parameters alone would give ~115 MB.
    if PACKS:
        assert bf16_default.model.weight_bytes() == 2 * (bf16_default.num_params + 49152 * 576)
    all_prompts = prompts(bf16_default.tokenizer)
    engine = make_engine(bf16_default, dtype="bfloat16")
    outputs = engine.generate(all_prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    worst = worst_gap_to_fp32(hf_reference, all_prompts, outputs)
    assert worst < 0.25, f"a bf16 pick {worst:.3f} below fp32's top"
