"""The fused MoE Triton kernels against the per-expert reference, and the reference against a dense loop.

Without a GPU these run in Triton's CPU interpreter (tests/inference/conftest.py), which emulates fp32
and fp16 dots but not bf16 ones; bench/gpu_kernels.py checks bf16 on CUDA.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inference.models.layers.moe.fused_experts import (
    align_pairs,
    fused_moe,
    moe_reference,
    supports,
    tile_config,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
Case = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def make_case(
    tokens: int,
    hidden: int,
    inter: int,
    experts: int,
    top_k: int,
    dtype: torch.dtype,
    *,
    used: list[int] | None = None,
    seed: int = 0,
) -> Case:
    """Random weights scaled to keep activations near 1; routing by softmax top-k over `used` experts."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    w_gate_up = torch.randn(experts, 2 * inter, hidden, generator=gen) * hidden**-0.5
    w_down = torch.randn(experts, hidden, inter, generator=gen) * inter**-0.5
    logits = torch.randn(tokens, experts, generator=gen)
    if used is not None:
        unused = torch.ones(experts, dtype=torch.bool)
        unused[used] = False
        logits[:, unused] = float("-inf")
    weights, ids = logits.softmax(-1).topk(top_k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    return (
        x.to(DEVICE, dtype),
        w_gate_up.to(DEVICE, dtype),
        w_down.to(DEVICE, dtype),
        weights.to(DEVICE),
        ids.to(DEVICE),
    )


def dense_moe(case: Case) -> torch.Tensor:
    """float64, token by token and expert by expert: the definition."""
    x, w_gate_up, w_down, weights, ids = (t.cpu() for t in case)
    inter = w_down.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64)
    for token in range(x.shape[0]):
        for slot in range(ids.shape[1]):
            expert = int(ids[token, slot])
            gate_up = w_gate_up[expert].double() @ x[token].double()
            act = F.silu(gate_up[:inter]) * gate_up[inter:]
            out[token] += float(weights[token, slot]) * (w_down[expert].double() @ act)
    return out


SHAPES = {
    # tokens, hidden, inter, experts, top_k
    "decode": (1, 40, 24, 8, 2),
    "two-k-blocks": (37, 136, 48, 8, 2),  # hidden past the decode tile's 128: masked second K block
    "top4-many-col-blocks": (37, 72, 96, 16, 4),
    "prefill-tiles": (300, 80, 40, 4, 2),  # many tokens per expert: the 64-row tiles, grouped order
    "128-experts-top8": (5, 32, 16, 128, 8),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_fused_moe_matches_reference(dtype: torch.dtype, shape: tuple[int, int, int, int, int]) -> None:
    case = make_case(*shape, dtype, seed=shape[0])
    assert supports(case[0], case[1])
    out = fused_moe(*case)
    expected = moe_reference(*case)
    assert out.dtype == dtype and out.shape == case[0].shape
    tol = 1e-5 if dtype == torch.float32 else 4e-3
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


def test_fused_moe_tiles_of_both_sizes_are_covered() -> None:
    """The shapes above reach both tile configurations (a guard on the test's own coverage)."""
    sizes = {tile_config(t * k, e).block_m for t, _, _, e, k in SHAPES.values()}
    assert sizes == {16, 64}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_experts_without_tokens_are_never_read(dtype: torch.dtype) -> None:
    case = make_case(37, 72, 48, 16, 4, dtype, used=[1, 5, 6, 11], seed=4)
    x, w_gate_up, w_down, weights, ids = case
    expected = moe_reference(*case)
    unused = [e for e in range(16) if e not in (1, 5, 6, 11)]
    w_gate_up[unused] = float("nan")  # any read of them would spread into the output
    w_down[unused] = float("nan")
    out = fused_moe(x, w_gate_up, w_down, weights, ids)
    assert torch.isfinite(out).all()
    tol = 1e-5 if dtype == torch.float32 else 4e-3
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("shape", [(1, 40, 24, 8, 2), (23, 48, 40, 16, 4)])
def test_reference_matches_dense_per_token(shape: tuple[int, int, int, int, int]) -> None:
    case = make_case(*shape, torch.float32, seed=7)
    expected = dense_moe(case)
    torch.testing.assert_close(moe_reference(*case).cpu().double(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_moe(*case).cpu().double(), expected, atol=1e-5, rtol=1e-5)


def test_align_pairs_groups_by_expert_in_order_and_pads_each_run() -> None:
    ids = torch.tensor([[3, 0], [0, 5], [3, 5], [0, 3], [5, 0]], device=DEVICE)
    sorted_pairs, block_experts, total = align_pairs(ids, num_experts=6, block_m=4)
    pad = ids.numel()  # 10: the id of a padding slot
    runs = {0: [1, 2, 6, 9], 3: [0, 4, 7, pad], 5: [3, 5, 8, pad]}  # pair = token * 2 + slot
    assert int(total) == 12
    assert sorted_pairs[:12].tolist() == runs[0] + runs[3] + runs[5]
    # Sized without reading the ids: room for 10 pairs + 6 experts * 3 padding = 7 blocks, 4 idle.
    assert block_experts.tolist() == [0, 3, 5, -1, -1, -1, -1]


def test_strided_inputs_give_the_contiguous_result() -> None:
    x, w_gate_up, w_down, weights, ids = make_case(9, 48, 32, 8, 1, torch.float32, seed=2)
    wide_x = torch.cat([x, torch.randn_like(x)], dim=1)[:, :48]  # rows strided, as a fused projection's
    wide_ids = torch.cat([ids, torch.zeros_like(ids)], dim=1)[:, :1]  # k = 1: reshape(-1) keeps a stride
    wide_weights = torch.cat([weights, torch.zeros_like(weights)], dim=1)[:, :1]
    expected = fused_moe(x, w_gate_up, w_down, weights, ids)
    out = fused_moe(wide_x, w_gate_up, w_down, wide_weights, wide_ids)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_no_tokens_gives_an_empty_result() -> None:
    x, w_gate_up, w_down, weights, ids = make_case(3, 32, 16, 4, 2, torch.float32)
    out = fused_moe(x[:0], w_gate_up, w_down, weights[:0], ids[:0])
    assert out.shape == (0, 32)


def test_supports() -> None:
    x, w_gate_up, *_ = make_case(2, 32, 16, 4, 2, torch.float32)
    assert supports(x, w_gate_up)
    assert supports(x.half(), w_gate_up.half())
    assert not supports(x.half(), w_gate_up)  # mixed dtypes
    assert not supports(x[:, :16], w_gate_up)  # hidden size disagrees
    assert not supports(x, w_gate_up[:, :31])  # 2*I must be even
    assert not supports(x.long(), w_gate_up.long())
    if DEVICE.type == "cpu":
        assert not supports(x.bfloat16(), w_gate_up.bfloat16())  # the interpreter cannot emulate bf16 dots
