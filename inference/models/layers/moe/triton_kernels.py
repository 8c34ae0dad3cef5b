# mypy: allow-untyped-defs
"""Triton kernels of the fused mixture-of-experts forward (inference/models/layers/moe/fused_experts.py drives
them).

`_align_kernel` orders the T*top_k (token, expert) pairs by expert and pads each expert's run to a
multiple of BLOCK_M, so that every BLOCK_M rows of the result belong to one expert; `_expert_gemm_kernel`
then multiplies each such block by its expert's weights, in one launch for all experts. Triton reads a
kernel's parameter annotations as specialization hints, so the kernels stay unannotated.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _align_kernel(
    topk_ids_ptr,
    sorted_pairs_ptr,
    block_experts_ptr,
    total_ptr,
    num_pairs,
    num_blocks,
    BLOCK_M: tl.constexpr,
    EXPERTS_PAD: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """One program. Writes sorted_pairs (pair ids by expert, each expert's run padded with num_pairs),
    block_experts (the expert of each BLOCK_M rows, -1 past the end) and total (the padded length).

    Pairs keep their order within an expert, so the result is the same on every run (no atomics).
    """
    experts = tl.arange(0, EXPERTS_PAD)
    lanes = tl.arange(0, CHUNK)
    counts = tl.zeros([EXPERTS_PAD], tl.int32)
    for start in range(0, num_pairs, CHUNK):
        pair = start + lanes
        ids = tl.load(topk_ids_ptr + pair, mask=pair < num_pairs, other=-1)
        counts += tl.sum((ids[:, None] == experts[None, :]).to(tl.int32), 0)
    padded = tl.cdiv(counts, BLOCK_M) * BLOCK_M
    ends = tl.cumsum(padded, 0)
    starts = ends - padded
    total = tl.sum(padded, 0)
    tl.store(total_ptr, total)

    # Each expert's padding slots: after its pairs, up to its padded end (disjoint from the pairs' slots).
    tail = tl.arange(0, BLOCK_M)
    slots = starts[:, None] + counts[:, None] + tail[None, :]
    tl.store(
        sorted_pairs_ptr + slots,
        tl.full([EXPERTS_PAD, BLOCK_M], 0, tl.int32) + num_pairs,
        mask=slots < ends[:, None],
    )

    # A block's expert: the first whose padded run ends past the block's first row.
    for start in range(0, num_blocks, CHUNK):
        block = start + lanes
        first = block * BLOCK_M
        expert = tl.sum((ends[None, :] <= first[:, None]).to(tl.int32), 1)
        tl.store(block_experts_ptr + block, tl.where(first < total, expert, -1), mask=block < num_blocks)

    # A pair's slot: its expert's start, plus the pairs of that expert before it (earlier chunks, then
    # earlier lanes of this chunk, an exclusive prefix count over the chunk's one-hot rows).
    seen = tl.zeros([EXPERTS_PAD], tl.int32)
    for start in range(0, num_pairs, CHUNK):
        pair = start + lanes
        valid = pair < num_pairs
        ids = tl.load(topk_ids_ptr + pair, mask=valid, other=-1)
        hits = (ids[:, None] == experts[None, :]).to(tl.int32)
        before = tl.cumsum(hits, 0) - hits + (starts + seen)[None, :]
        slot = tl.sum(before * hits, 1)
        tl.store(sorted_pairs_ptr + slot, pair, mask=valid)
        seen += tl.sum(hits, 0)


@triton.jit
def _expert_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    weights_ptr,
    sorted_pairs_ptr,
    block_experts_ptr,
    total_ptr,
    num_pairs,
    num_m_blocks,
    n_out,
    k_dim,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    A_ROW_DIV: tl.constexpr,
    GATED: tl.constexpr,
    WEIGHTED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """c[pair, n] = sum_k a[pair // A_ROW_DIV, k] * b[expert(pair), n, k] for the pairs of one row block.

    GATED: b holds 2 * n_out rows (gate, then up); c gets silu(gate) * up. WEIGHTED: c is scaled by the
    pair's routing weight. Both in fp32, before the cast to c's dtype.
    """
    pid = tl.program_id(0)
    num_n_blocks = tl.cdiv(n_out, BLOCK_N)
    # Grouped order: GROUP_M row blocks share each column block while it sits in L2.
    per_group = GROUP_M * num_n_blocks
    first_m = (pid // per_group) * GROUP_M
    group_size = tl.minimum(num_m_blocks - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_size
    pid_n = (pid % per_group) // group_size
    if pid_m * BLOCK_M >= tl.load(total_ptr):
        return  # past the padded pairs: the grid is sized for the worst case, so no host sync is needed

    pairs = tl.load(sorted_pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    real = pairs < num_pairs
    expert = tl.load(block_experts_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_out
    ks = tl.arange(0, BLOCK_K)
    a_rows = (pairs // A_ROW_DIV).to(tl.int64)
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + cols[None, :].to(tl.int64) * stride_bn + ks[:, None] * stride_bk
    up_offset = n_out * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, k_dim, BLOCK_K):
        k_ok = ks < k_dim - k0
        a = tl.load(a_ptrs, mask=real[:, None] & k_ok[None, :], other=0.0)
        b_mask = k_ok[:, None] & col_ok[None, :]
        b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        if GATED:
            b_up = tl.load(b_ptrs + up_offset, mask=b_mask, other=0.0)
            acc_up = tl.dot(a, b_up, acc_up, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if GATED:
        acc = acc * tl.sigmoid(acc) * acc_up
    if WEIGHTED:
        acc = acc * tl.load(weights_ptr + pairs, mask=real, other=0.0)[:, None]
    c_ptrs = c_ptr + pairs.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=real[:, None] & col_ok[None, :])
