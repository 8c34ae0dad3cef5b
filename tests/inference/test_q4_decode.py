"""Small bf16 decode batches read a GGUF's Q4 blocks, expanded to the model's own bf16 weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from inference import SamplingParams
from inference.gguf_q4 import read_blocks
from inference.loader import LoadedModel, default_gguf_path, load_model
from inference.models import q4_decode
from inference.models.int4 import GROUP, Q4Blocks
from inference.models.layers import Linear
from inference.models.q4_decode import Q8Blocks, decode_weight, eligible, matches, max_rows, q4_linear
from tests.inference.real_model import MAX_TOKENS, make_engine, prompts, worst_gap_to_fp32

CPU_SUPPORTED = q4_decode._cpu_supported()
needs_kernel = pytest.mark.skipif(not CPU_SUPPORTED, reason="the Q4 decode kernel needs AVX512-BF16")


def gguf_like_blocks(out_features: int, in_features: int, seed: int) -> Q4Blocks:
    """Levels with fp16-representable scales and minimums, as a GGUF stores them."""
    rng = np.random.default_rng(seed)
    groups = in_features // GROUP
    return Q4Blocks(
        rng.integers(0, 16, (out_features, in_features), dtype=np.uint8),
        rng.uniform(0.001, 0.03, (out_features, groups)).astype(np.float16).astype(np.float32),
        rng.normal(0, 0.1, (out_features, groups)).astype(np.float16).astype(np.float32),
    )


def gguf_like_q8(out_features: int, in_features: int, seed: int) -> Q8Blocks:
    rng = np.random.default_rng(seed)
    return Q8Blocks(
        rng.integers(-128, 128, (out_features, in_features), dtype=np.int8),
        rng.uniform(0.0005, 0.01, (out_features, in_features // GROUP)).astype(np.float16).astype(np.float32),
    )


BLOCKS = {"q4": gguf_like_blocks, "q8": gguf_like_q8}


def dense_bf16(blocks: Q4Blocks | Q8Blocks) -> torch.Tensor:
    return torch.from_numpy(blocks.dequantize()).to(torch.bfloat16)


def test_the_kernel_builds_wherever_the_cpu_can_run_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing compiler or ninja must fail here, not turn into a silent fallback on a capable CPU."""
    monkeypatch.delenv("MOONCAKE_Q4_DECODE", raising=False)
    q4_decode.kernel_available.cache_clear()
    try:
        assert q4_decode.kernel_available() == CPU_SUPPORTED
        monkeypatch.setenv("MOONCAKE_Q4_DECODE", "0")
        q4_decode.kernel_available.cache_clear()
        assert not q4_decode.kernel_available()
    finally:
        monkeypatch.delenv("MOONCAKE_Q4_DECODE")
        q4_decode.kernel_available.cache_clear()


@needs_kernel
@pytest.mark.parametrize("kind", sorted(BLOCKS))
def test_one_hot_rows_read_every_weight_bit_for_bit(kind: str) -> None:
    """Nibble order, block pairs, both paths (registers up to 2 rows, AMX tiles above where the CPU has
    them) and the ragged last row group: x = e_k returns column k of bf16(d * q + m)."""
    assert q4_decode.kernel_available()
    blocks = BLOCKS[kind](37, 192, 0)
    weight, dense = decode_weight(blocks), dense_bf16(blocks)
    for rows in sorted({1, 2, 3, 4, max_rows()}):
        for start in range(0, 192, rows):
            columns = [c % 192 for c in range(start, start + rows)]
            one_hot = torch.zeros(rows, 192, dtype=torch.bfloat16)
            one_hot[range(rows), columns] = 1
            assert torch.equal(q4_linear(one_hot, weight, None), dense[:, columns].T), f"{rows} rows"


@needs_kernel
@pytest.mark.parametrize("kind", sorted(BLOCKS))
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 9, 16])
def test_the_product_is_the_bf16_linears_up_to_accumulation_order(kind: str, rows: int) -> None:
    assert q4_decode.kernel_available()
    if rows > max_rows():
        pytest.skip("more than 4 rows need AMX tiles")
    blocks = BLOCKS[kind](130, 576, rows)
    dense = dense_bf16(blocks)
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 576, generator=gen).bfloat16()
    bias = torch.randn(130, generator=gen).bfloat16()
    out = q4_linear(x, decode_weight(blocks), bias)
    assert out.dtype == torch.bfloat16 and out.shape == (rows, 130)
    exact = x.float() @ dense.float().T + bias.float()
    # One rounding to bf16 at the end, as F.linear: within half a bf16 step of the fp32 product.
    assert torch.all((out.float() - exact).abs() <= exact.abs() * 2**-8 + 1e-6)
    differing = (out != F.linear(x, dense, bias)).float().mean().item()
    assert differing < 0.02, f"{differing:.1%} of outputs differ from bf16 F.linear"


@needs_kernel
def test_without_amx_the_register_path_takes_up_to_four_rows(tmp_path: Path) -> None:
    """MOONCAKE_Q4_AMX=0 (as on an AVX512-BF16 CPU without AMX): 3 and 4 rows go through registers."""
    script = tmp_path / "registers.py"
    script.write_text(
        "import torch\n"
        "from inference.models import q4_decode\n"
        "from tests.inference.test_q4_decode import BLOCKS, dense_bf16\n"
        "assert q4_decode.kernel_available() and q4_decode.max_rows() == 4\n"
        "for kind, make in sorted(BLOCKS.items()):\n"
        "    blocks = make(21, 128, 5)\n"
        "    weight, dense = q4_decode.decode_weight(blocks), dense_bf16(blocks)\n"
        "    for rows in (3, 4):\n"
        "        one_hot = torch.eye(128, dtype=torch.bfloat16)[:rows]\n"
        "        assert torch.equal(q4_decode.q4_linear(one_hot, weight, None), dense[:, :rows].T), kind\n"
        "print('ok')\n"
    )
    env = {**os.environ, "MOONCAKE_Q4_AMX": "0", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


@needs_kernel
def test_the_kernel_refuses_what_it_cannot_multiply() -> None:
    assert q4_decode.kernel_available()
    blocks = gguf_like_blocks(8, 128, seed=1)
    weight = decode_weight(blocks)
    with pytest.raises(RuntimeError, match=f"1 to {max_rows()} rows"):
        q4_linear(torch.zeros(max_rows() + 1, 128, dtype=torch.bfloat16), weight, None)
    with pytest.raises(RuntimeError, match="bf16"):
        q4_linear(torch.zeros(1, 128), weight, None)


def test_the_default_gguf_q8_embedding_is_read_exactly(default_model_dir: Path) -> None:
    """The tied head's Q8_0 blocks reproduce the dequantized cache (which gguf-py wrote) bit for bit."""
    from safetensors import safe_open

    read = read_blocks(default_gguf_path(), num_heads=9, num_kv_heads=3)
    blocks = read.embedding
    assert blocks is not None and blocks.levels.shape == (49152, 576)
    with safe_open(str(default_model_dir / "model.safetensors"), framework="np") as f:
        np.testing.assert_array_equal(blocks.dequantize(), f.get_tensor("model.embed_tokens.weight"))
    assert "model.embed_tokens.weight" not in read.linears  # Q8_0 is not a 4-bit linear


def test_only_exact_block_pairs_are_taken() -> None:
    blocks = gguf_like_blocks(8, 128, seed=2)
    dense = dense_bf16(blocks)
    assert eligible(blocks) and not eligible(gguf_like_blocks(8, 96, seed=2))
    assert matches(blocks, dense)
    off_by_one_step = dense.clone()
    off_by_one_step.view(torch.int16)[3, 5] += 1
    assert not matches(blocks, off_by_one_step)
    assert not matches(blocks, dense.float())


def test_a_linear_reads_its_blocks_only_for_small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = gguf_like_blocks(64, 128, seed=3)
    linear = Linear(128, 64, bias=False).bfloat16()
    linear.weight.data.copy_(dense_bf16(blocks))
    linear.q4_decode = decode_weight(blocks)
    monkeypatch.setattr("inference.models.layers.max_rows", lambda: 4)
    calls: list[int] = []

    def spy(x: torch.Tensor, weight: object, bias: object) -> torch.Tensor:
        calls.append(x.numel() // 128)
        return F.linear(x, linear.weight)

    monkeypatch.setattr("inference.models.layers.q4_linear", spy)
    linear(torch.randn(2, 2, 128).bfloat16())
    linear(torch.randn(5, 128).bfloat16())
    assert calls == [4]


@pytest.fixture(scope="module")
def bf16_from_gguf(test_cache_dir: Path) -> LoadedModel:
    return load_model("default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir)


@needs_kernel
@pytest.mark.slow
@pytest.mark.parametrize("num_seqs", [1, 8])
@torch.inference_mode()
def test_the_default_model_in_bf16_decodes_small_batches_from_its_q4_blocks(
    bf16_from_gguf: LoadedModel, hf_reference: torch.nn.Module, num_seqs: int
) -> None:
    """Every projection's bf16 weight is its Q4_1 block's values (checked bit for bit at load), and greedy
    picks of one stream (registers) and of eight (AMX tiles, where there are) stay on what fp32 ranks
    first, as the packed bf16 path's do (measured worst: 0.160 either way, at 1, 3, 8 and 16 sequences)."""
    linears = [m for m in bf16_from_gguf.model.modules() if isinstance(m, Linear)]
    assert len(linears) == 30 * 4 and all(m.q4_decode is not None for m in linears)
    assert all(m.packed_weight is not None for m in linears)  # larger batches stay on oneDNN
    assert bf16_from_gguf.model._head_decode is not None  # the tied head, from its Q8_0 embedding
    all_prompts = prompts(bf16_from_gguf.tokenizer)
    engine = make_engine(bf16_from_gguf, dtype="bfloat16", max_num_seqs=num_seqs)
    outputs = engine.generate(all_prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    worst = worst_gap_to_fp32(hf_reference, all_prompts, outputs)
    assert worst < 0.25, f"a pick {worst:.3f} below fp32's top"


def test_fp32_and_folders_never_take_the_path(default_loaded: LoadedModel) -> None:
    """The fp32 oracle model (loaded from the converted folder) has no 4-bit copies."""
    assert not any(getattr(m, "q4_decode", None) is not None for m in default_loaded.model.modules())
