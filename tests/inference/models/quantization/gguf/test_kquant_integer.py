"""K-quant decoding rows in integers (csrc/avx512/kquant_int16.h, kquant_int8.h), held to gguf-py's
dequantized
weights: the product with `quantized_activations(x)` within one bf16 rounding, the activations' own rounding
within its bound, and a row's bits the same whatever else its call holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inference.models.kernels import build as kernel_build
from inference.models.quantization.gguf.avx512 import Avx512Kernel, load_kernel
from inference.models.quantization.gguf.formats import KQuantBlocks
from inference.models.quantization.gguf.layout import decode_weight
from inference.models.quantization.gguf.method import GGUFDecodeMethod
from inference.models.quantization.gguf.reference import quantized_activations
from inference.models.quantization.setup import LinearPlan, choose_method

pytestmark = pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the kernels need AVX512-BF16")

KQUANTS = ["Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
LEVELS = {"int16": 8191, "int8": 127}


@pytest.fixture(scope="module", params=list(LEVELS))
def kernel(request: pytest.FixtureRequest, test_cache_dir: Path) -> Avx512Kernel:
    loaded = load_kernel(test_cache_dir, amx=False, activations=request.param)
    assert loaded is not None and loaded.activations == request.param
    return loaded


def dense(blocks: KQuantBlocks) -> torch.Tensor:
    return torch.from_numpy(blocks.dequantize()).double()


@pytest.mark.parametrize("type_name", KQUANTS)
@pytest.mark.parametrize("shape", [(45, 768), (33, 256), (20, 2048)])
def test_every_row_count_is_the_quantized_activations_product_within_one_bf16_rounding(
    kernel: Avx512Kernel, type_name: str, shape: tuple[int, int]
) -> None:
    """Output rows that do and do not fill the kernel's groups of weight rows, 1 to 16 activation rows."""
    blocks = KQuantBlocks.random(type_name, *shape, seed=shape[0])
    weight = decode_weight(blocks)
    gen = torch.Generator().manual_seed(shape[1])
    x = torch.randn(16, shape[1], generator=gen).bfloat16()
    bias = torch.randn(shape[0], generator=gen).bfloat16()
    full = kernel.linear(x, weight, bias)
    exact = quantized_activations(x, kernel.activations).double() @ dense(blocks).T + bias.double()
    assert torch.all((full.double() - exact).abs() <= exact.abs() * 2**-8 + 1e-5)
    for rows in (1, 2, 3, 5, 9):
        for start in (0, 16 - rows):
            part = kernel.linear(x[start : start + rows], weight, bias)
            assert torch.equal(part, full[start : start + rows]), f"{rows} rows from {start}"


@pytest.mark.parametrize("type_name", KQUANTS)
def test_the_activations_rounding_stays_within_half_a_step_per_value(
    kernel: Avx512Kernel, type_name: str
) -> None:
    """Against the bf16 activations' exact product: each value is off by at most half of its super-block's
    step (amax / L), so a row is off by at most half a step times the weights' absolute sum per
    super-block."""
    blocks = KQuantBlocks.random(type_name, 40, 1024, seed=2)
    w = dense(blocks)
    x = torch.randn(3, 1024, generator=torch.Generator().manual_seed(4)).bfloat16()
    x[1, :256] *= 50  # one loud super-block: the others keep their own steps
    out = kernel.linear(x, decode_weight(blocks), None).double()
    exact = x.double() @ w.T
    steps = x.double().view(3, 4, 256).abs().amax(-1) / LEVELS[kernel.activations]  # [rows, super-blocks]
    bound = 0.5 * steps @ w.abs().view(40, 4, 256).sum(-1).T  # [rows, out]
    assert torch.all((out - exact).abs() <= bound + exact.abs() * 2**-8 + 1e-5)
    error = (quantized_activations(x, kernel.activations).double() - x.double()).abs()
    assert torch.all(
        error <= steps.repeat_interleave(256, 1) / 2 + x.double().abs() * 2**-20
    )  # q * d in fp32


def test_fourteen_bit_activations_land_far_closer_than_eight_bit_ones(test_cache_dir: Path) -> None:
    """The reason int16 is the default: against the bf16 activations' exact product, its error is a small
    fraction of int8's (llama.cpp's numerics)."""
    blocks = KQuantBlocks.random("Q4_K", 64, 2048, seed=8)
    x = torch.randn(4, 2048, generator=torch.Generator().manual_seed(6)).bfloat16()
    exact = x.double() @ dense(blocks).T
    errors = {}
    for activations in LEVELS:
        kernel = load_kernel(test_cache_dir, amx=False, activations=activations)
        assert kernel is not None
        errors[activations] = (kernel.linear(x, decode_weight(blocks), None).double() - exact).abs().mean()
    # int16's error is mostly the output's bf16 rounding; int8's is the activations'.
    assert errors["int16"] * 3 < errors["int8"], errors


def test_zero_rows_and_single_values_are_read_exactly(kernel: Avx512Kernel) -> None:
    """An all-zero super-block gives 0 (no division by its zero amax); a one-hot row quantizes its value to
    L steps of itself, so it reads the dequantized column scaled by that value."""
    blocks = KQuantBlocks.random("Q4_K", 24, 512, seed=9)
    weight = decode_weight(blocks)
    bias = torch.randn(24, generator=torch.Generator().manual_seed(1)).bfloat16()
    zero = kernel.linear(torch.zeros(2, 512, dtype=torch.bfloat16), weight, bias)
    assert torch.equal(zero, bias.expand(2, 24))
    one_hot = torch.zeros(1, 512, dtype=torch.bfloat16)
    one_hot[0, 300] = 2.0
    expected = (2.0 * dense(blocks)[:, 300]).to(torch.bfloat16)
    assert torch.allclose(
        kernel.linear(one_hot, weight, None)[0].double(), expected.double(), rtol=2**-7, atol=0
    )


def test_a_layer_decodes_in_integers_and_batches_through_the_bf16_tiles(kernel: Avx512Kernel) -> None:
    """Up to 16 rows: the integer path; past them (or with prompt chunks in the step) the blocks' bf16 batch
    path, whose numerics are the dense weights' (test_kquant_decode.py)."""
    blocks = KQuantBlocks.random("Q6_K", 32, 512, seed=3)
    bf16 = dense(blocks).to(torch.bfloat16)
    method = choose_method(bf16, [blocks], LinearPlan(kernel=kernel, dense_copy=False))
    assert isinstance(method, GGUFDecodeMethod)
    x = torch.randn(20, 512, generator=torch.Generator().manual_seed(5)).bfloat16()
    empty = torch.empty(0)
    assert torch.equal(method.apply(x[:4], empty, None), kernel.linear(x[:4], method.parts[0], None))
    assert torch.equal(method.apply(x, empty, None), kernel.batch_linear(x, method.parts[0], None))
    assert not torch.equal(
        method.apply(x[:4], empty, None), kernel.batch_linear(x[:4], method.parts[0], None)
    )


def test_the_setting_is_checked_where_it_is_written() -> None:
    from inference import EngineConfig

    assert EngineConfig().kquant_activations == "auto"
    with pytest.raises(ValueError, match="kquant_activations must be one of"):
        EngineConfig(kquant_activations="int4")
