"""csrc/avx2/blocks.cpp: every GGUF block type read as stored, for fp32 models on CPUs without AVX512-BF16.
Runs on every x86-64 CPU with AVX2 (AVX512 ones included: the library uses only AVX2, FMA and F16C)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from inference.models.kernels import build as kernel_build
from inference.models.quantization.gguf.avx2 import (
    Avx2Kernel,
    activations_for,
    agrees,
    load_avx2_kernel,
    quantized_input,
)
from inference.models.quantization.gguf.formats import (
    KQUANT_BYTES,
    BlockMatrix,
    KQuantBlocks,
    Q4Blocks,
    Q8Blocks,
)
from inference.models.quantization.gguf.layout import decode_weight

pytestmark = pytest.mark.skipif(not kernel_build.avx2_supported(), reason="the kernels need AVX2")

TYPES = ["Q4_0", "Q4_1", "Q8_0", *KQUANT_BYTES]


@pytest.fixture(scope="module", params=[True, False], ids=["14-bit", "int8"])
def kernel(request: pytest.FixtureRequest, test_cache_dir: Path) -> Avx2Kernel:
    loaded = load_avx2_kernel(test_cache_dir, activations="int16" if request.param else "int8")
    assert loaded is not None and loaded.wide is request.param
    return loaded


def test_auto_activations_are_int8_for_a_file_of_q4_and_q8_0_blocks_and_14_bits_with_k_quants() -> None:
    """As measured perplexity allows (README "Accuracy"); a setting by name is kept."""
    assert activations_for("auto", frozenset({"Q4_1", "Q8_0", "F32"})) == "int8"  # the bundled model
    assert activations_for("auto", frozenset({"Q8_0", "F32"})) == "int8"
    assert activations_for("auto", frozenset({"Q4_K", "Q6_K", "Q5_0", "Q8_0", "F32"})) == "int16"
    assert activations_for("auto", frozenset({"IQ4_XS", "Q8_0"})) == "int16"
    assert activations_for("auto", None) == "int8"  # not a GGUF: no blocks to read
    for setting in ("int8", "int16", "bf16"):
        assert activations_for(setting, frozenset({"Q4_1"})) == setting


def random_blocks(kind: str, out_features: int, in_features: int, seed: int = 0) -> BlockMatrix:
    """Blocks from random bytes with valid (fp16) scales, as a file stores them."""
    if kind in KQUANT_BYTES:
        return KQuantBlocks.random(kind, out_features, in_features, seed=seed)
    rng = np.random.default_rng(seed)
    groups = (out_features, in_features // 32)
    scale = rng.uniform(0.001, 0.02, groups).astype(np.float16).astype(np.float32)
    if kind == "Q8_0":
        return Q8Blocks(rng.integers(-128, 128, (out_features, in_features), dtype=np.int8), scale)
    minimum = (
        -8 * scale if kind == "Q4_0" else rng.normal(0, 0.05, groups).astype(np.float16).astype(np.float32)
    )
    return Q4Blocks.from_levels(
        rng.integers(0, 16, (out_features, in_features), dtype=np.uint8), scale, minimum
    )


def dense(blocks: BlockMatrix) -> torch.Tensor:
    return torch.from_numpy(np.asarray(blocks.dequantize(), dtype=np.float64)).view(blocks.shape)


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 16, 70])
def test_each_type_is_the_product_of_the_quantized_input_with_gguf_pys_weights(
    kernel: Avx2Kernel, kind: str, rows: int
) -> None:
    """Within fp32 summation error of quantized_input(x) @ W.T (W: gguf-py's dequantization), for whole and
    partial super-blocks' worth of output rows; 70 rows cross the kernel's 64-row passes and 4-row groups."""
    for out_features, in_features in [(7, 256), (33, 512), (1, 1024)]:
        if kind not in KQUANT_BYTES and in_features == 256:
            in_features = 96  # Q4/Q8_0 blocks are 32 wide: an input that is no multiple of 64 either
        assert agrees(kernel, random_blocks(kind, out_features, in_features, seed=rows), rows=rows)


@pytest.mark.parametrize("kind", TYPES)
def test_the_quantized_input_is_within_half_a_step_and_the_product_within_its_error(
    kernel: Avx2Kernel, kind: str
) -> None:
    """Each value is rounded to the nearest of its block's levels (amax / 8191 or amax / 127 apart, per 32
    values for Q4/Q8_0 blocks, per 256 for K-quants), and the product moves by at most that rounding times
    the weights."""
    blocks = random_blocks(kind, 40, 512, seed=3)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(1))
    x[:, 7] = 40.0  # an outlier coarsens only its own block
    block = 256 if kind in KQUANT_BYTES else 32
    xq = quantized_input(x, kernel.wide, block)
    amax = x.abs().view(5, -1, block).amax(-1, keepdim=True)
    half_step = (amax / (8191 if kernel.wide else 127) / 2).expand(5, -1, block).reshape(5, 512)
    assert ((xq - x).abs() <= half_step * (1 + 1e-5)).all()
    assert (half_step[:, :1] > half_step[:, block:]).all()  # the outlier's block alone is coarse
    out = kernel.linear(x, decode_weight(blocks), None).double()
    weights = dense(blocks)
    moved = (xq - x).double().abs() @ weights.abs().T
    slack = 1e-5 * x.double().abs().sum(1, keepdim=True) * weights.abs().amax(1)
    assert ((out - x.double() @ weights.T).abs() <= moved + slack).all()


@pytest.mark.parametrize("kind", TYPES)
def test_a_row_gets_the_same_bits_alone_as_in_any_batch(kernel: Avx2Kernel, kind: str) -> None:
    """From 4 rows on, signed levels meet 14-bit activations as int16 rather than as two int8 halves: the
    int32 sums are the same integers, so no row count changes a row's bits (1-3, 4 and the 64-row passes)."""
    weight = decode_weight(random_blocks(kind, 20, 512))
    x = torch.randn(67, 512, generator=torch.Generator().manual_seed(2)) * 4
    together = kernel.linear(x, weight, None)
    for rows in (1, 3, 4, 5):
        assert torch.equal(kernel.linear(x[:rows], weight, None), together[:rows])
    for row in (0, 3, 64, 66):
        assert torch.equal(kernel.linear(x[row : row + 1], weight, None), together[row : row + 1])
    assert torch.equal(kernel.batch_linear(x, weight, None), together)


def test_bias_leading_dimensions_and_input_dtype(kernel: Avx2Kernel) -> None:
    blocks = random_blocks("Q4_K", 12, 256)
    weight = decode_weight(blocks)
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(4))
    bias = torch.linspace(-1, 1, 12)
    out = kernel.linear(x, weight, bias)
    assert out.shape == (2, 3, 12) and out.dtype == torch.float32
    assert torch.equal(out, kernel.linear(x, weight, None) + bias)
    half = kernel.linear(x.bfloat16(), weight, None)
    assert half.dtype == torch.bfloat16
    assert torch.equal(half, kernel.linear(x.bfloat16().float(), weight, None).bfloat16())


def test_mismatched_blocks_are_refused(kernel: Avx2Kernel) -> None:
    weight = decode_weight(random_blocks("Q5_K", 4, 512))
    with pytest.raises(RuntimeError, match="do not match"):
        kernel.linear(torch.randn(1, 256), weight, None)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        kernel.linear(torch.randn(1, 100), decode_weight(random_blocks("Q8_0", 4, 96)), None)


def test_the_install_step_builds_the_avx2_library_where_avx512_bf16_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kernel_build, "cpu_supported", lambda: False)
    assert kernel_build.main(["--cache-dir", str(tmp_path)]) == 0
    library = kernel_build.library_path(tmp_path, kernel_build.AVX2_LIBRARY)
    assert str(library) in capsys.readouterr().out and library.stat().st_mode & 0o777 == 0o700
    assert not kernel_build.library_path(tmp_path).exists()  # the AVX512 library is not built
