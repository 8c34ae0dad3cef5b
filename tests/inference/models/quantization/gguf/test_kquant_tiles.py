"""Several K-quant decoding rows on AMX-INT8 tiles (csrc/avx512/kquant_tiles.h), held to the register paths
(kquant_int8.h, kquant_int16.h) bit for bit: every type, both activation widths, every row count, so a
server that switches paths by row count changes no answer. Only AMX CPUs have the tile path; on the others
(AMD EPYC, for one) there is nothing here to run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from inference.models.kernels import build as kernel_build
from inference.models.quantization.gguf.avx512 import load_kernel
from inference.models.quantization.gguf.formats import KQUANT_BYTES, KQuantBlocks
from inference.models.quantization.gguf.reference import quantized_activations

pytestmark = pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the kernels need AVX512-BF16")

KQUANTS = ["Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
WIDTHS = {"int8": 1, "int16": 2}


@pytest.fixture(scope="module", autouse=True)
def tiles(test_cache_dir: Path) -> None:
    assert load_kernel(test_cache_dir, amx=False, activations="int16") is not None
    if not torch.ops.mooncake_avx512.integer_tiles_available():
        pytest.skip("this CPU has no AMX-INT8 tiles")


def both_paths(x: torch.Tensor, blocks: KQuantBlocks, width: str) -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.from_numpy(blocks.raw)
    op = torch.ops.mooncake_avx512.kquant_integer_linear
    return op(x, raw, blocks.type_id, WIDTHS[width], True), op(x, raw, blocks.type_id, WIDTHS[width], False)


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("type_name", KQUANTS)
@pytest.mark.parametrize("shape", [(45, 768), (33, 256), (20, 2048), (16, 512)])
def test_the_tiles_give_the_registers_bits_at_every_row_count(
    type_name: str, width: str, shape: tuple[int, int]
) -> None:
    """Weight rows that do and do not fill a group of 16; a loud row and a zero row among the others."""
    blocks = KQuantBlocks.random(type_name, *shape, seed=shape[0] + len(type_name))
    x = torch.randn(16, shape[1], generator=torch.Generator().manual_seed(shape[1])).bfloat16()
    x[2] *= 60
    x[5] = 0
    for rows in range(1, 17):
        tiles, registers = both_paths(x[:rows], blocks, width)
        assert torch.equal(tiles, registers), f"{rows} rows"


def extreme_blocks(
    type_name: str, out_features: int, in_features: int, top_levels: bool = False
) -> KQuantBlocks:
    """Every level and sub-block scale at its largest magnitude, so the integer sums reach their bounds.
    Q6_K has two extremes: levels 0 (the centred weight's largest, -32) and 63 (the raw level's largest,
    which the register kernel multiplies before taking the centre back)."""
    half = np.array([0.01], dtype=np.float16).view(np.uint8)
    size = KQUANT_BYTES[type_name]
    blocks = np.zeros((out_features, in_features // 256, size), dtype=np.uint8)
    if type_name == "Q6_K":  # levels 0 (0 - 32) or 63, scales -128: |w| = 4096 or 3968
        if top_levels:
            blocks[..., 0:192] = 0xFF
        blocks[..., 192:208] = 0x80
        blocks[..., 208:210] = half
    elif type_name == "IQ4_XS":  # index 0 (-127), scale 0 - 32
        blocks[..., 0:2] = half
    else:  # every bit set: levels 15 or 31, scales and minimums 63
        blocks[...] = 0xFF
        blocks[..., 0:2] = half
        blocks[..., 2:4] = half
    return KQuantBlocks(type_name, blocks.reshape(out_features, -1))


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("type_name", [*KQUANTS, "Q6_K top levels"])
def test_sums_at_their_bounds_stay_exact(type_name: str, width: str) -> None:
    """Activations at +-amax on every value: every partial sum of either path at its largest. Both still
    equal the exact product within one bf16 rounding, and each other to the bit."""
    top_levels = type_name.endswith("top levels")
    blocks = extreme_blocks(type_name.split()[0], 20, 1024, top_levels)
    x = torch.ones(6, 1024, dtype=torch.bfloat16)
    x[1] = -1
    x[2, ::2] = -1
    x[3] = 3.5
    x[4, :512] = -1
    tiles, registers = both_paths(x, blocks, width)
    assert torch.equal(tiles, registers)
    xq, w = quantized_activations(x, width).double(), torch.from_numpy(blocks.dequantize()).double()
    exact = xq @ w.T
    # One bf16 rounding, plus fp32's over the partial sums where they cancel (the row of -1s and 1s).
    bound = exact.abs() * 2**-8 + (xq.abs() @ w.abs().T) * 2**-20
    assert torch.all((tiles.double() - exact).abs() <= bound)


def test_the_forced_tile_path_checks_its_input() -> None:
    blocks = KQuantBlocks.random("Q4_K", 16, 256, seed=1)
    raw = torch.from_numpy(blocks.raw)
    op = torch.ops.mooncake_avx512.kquant_integer_linear
    with pytest.raises(RuntimeError, match="1 to 16 rows"):
        op(torch.zeros(17, 256, dtype=torch.bfloat16), raw, blocks.type_id, 2, True)
    with pytest.raises(RuntimeError, match="activations must be"):
        op(torch.zeros(2, 256, dtype=torch.bfloat16), raw, blocks.type_id, 0, True)
