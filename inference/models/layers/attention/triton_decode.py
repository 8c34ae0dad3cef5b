"""Triton kernels for the paged cache: store the step's keys/values, and decode attention over the blocks.

Decode reads each sequence's keys and values in place through its block table, so a step reads the cache
once instead of gathering every row's context into a padded workspace first (the torch backend's way).
One program serves one sequence, one KV head and one split of the context; the query heads of a GQA group
share the keys they read. Long contexts in small batches are split across programs (flash-decoding) and
the splits' partial softmax states merged by a second kernel. Nothing reads the host: the kernels take
their lengths from device tensors, so a decode step can be captured in a CUDA graph.

Set TRITON_INTERPRET=1 before the first import to run these on CPU (the tests do; bf16 dots are not
emulated there, fp16 and fp32 are).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

TILE = 64  # cache positions per loop iteration of a decode program
MAX_SPLITS = 16
LOG2E = 1.4426950408889634


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    stride_k,
    stride_v,
    ROW: tl.constexpr,
    ROW_PAD: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot >= 0:  # a negative slot marks a padding row of a captured batch: it owns no cache slot
        cols = tl.arange(0, ROW_PAD)
        inside = cols < ROW
        key = tl.load(k_ptr + token * stride_k + cols, mask=inside)
        value = tl.load(v_ptr + token * stride_v + cols, mask=inside)
        tl.store(k_cache_ptr + slot * ROW + cols, key.to(k_cache_ptr.dtype.element_ty), mask=inside)
        tl.store(v_cache_ptr + slot * ROW + cols, value.to(v_cache_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _paged_decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    table_ptr,
    context_lens_ptr,
    out_ptr,
    max_ptr,
    sum_ptr,
    acc_ptr,
    scale_log2,
    window,
    cap_scale,
    cap_log2,
    stride_qb,
    stride_qh,
    stride_tb,
    stride_ob,
    stride_oh,
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    # A sliding window (window > 0) hides keys at or before context_len - 1 - window: tiles wholly
    # before the first visible key are never read.
    oldest = tl.where(window > 0, tl.maximum(context_len - window, 0), 0)
    start_tile = oldest // TILE_N
    end_tile = tl.cdiv(context_len, TILE_N)
    tiles_per_split = tl.cdiv(end_tile - start_tile, NUM_SPLITS)
    first_tile = start_tile + split * tiles_per_split
    last_tile = tl.minimum(first_tile + tiles_per_split, end_tile)

    group = tl.arange(0, GROUP_PAD)
    in_group = group < GROUP
    heads = kv_head * GROUP + group
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(
        q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :],
        mask=in_group[:, None],
        other=0.0,
    )
    running_max = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    running_sum = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    token_stride = NUM_KV_HEADS * HEAD_DIM
    for tile in range(first_tile, last_tile):
        pos = tile * TILE_N + tl.arange(0, TILE_N)
        valid = (pos < context_len) & (pos >= oldest)
        block = tl.load(table_ptr + seq * stride_tb + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
        offsets = (block * BLOCK_SIZE + pos % BLOCK_SIZE) * token_stride + kv_head * HEAD_DIM
        keys = tl.load(k_cache_ptr + offsets[:, None] + dims[None, :], mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(keys), input_precision=DOT_PRECISION)
        if SOFTCAP:
            # softcap * tanh(scale * qk / softcap), in log2 units; tanh(x) = 1 - 2 / (1 + e^2x) saturates
            # cleanly at both ends (e^2x overflowing to inf gives 1).
            capped = 1.0 - 2.0 / (1.0 + tl.exp(2.0 * scores * cap_scale))
            scores = capped * cap_log2
        else:
            scores = scores * scale_log2
        scores = tl.where(valid[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        rescale = tl.exp2(running_max - new_max)
        probs = tl.exp2(scores - new_max[:, None])
        running_sum = running_sum * rescale + tl.sum(probs, 1)
        values = tl.load(v_cache_ptr + offsets[:, None] + dims[None, :], mask=valid[:, None], other=0.0)
        acc = acc * rescale[:, None] + tl.dot(probs.to(values.dtype), values, input_precision=DOT_PRECISION)
        running_max = new_max

    if NUM_SPLITS == 1:
        out = acc / running_sum[:, None]
        tl.store(
            out_ptr + seq * stride_ob + heads[:, None] * stride_oh + dims[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=in_group[:, None],
        )
    else:
        # Unnormalized partial state of this split; a split past the context keeps max -inf and sum 0.
        row = (seq * NUM_KV_HEADS * GROUP + heads) * NUM_SPLITS + split
        tl.store(max_ptr + row, running_max, mask=in_group)
        tl.store(sum_ptr + row, running_sum, mask=in_group)
        tl.store(acc_ptr + row[:, None] * HEAD_DIM + dims[None, :], acc, mask=in_group[:, None])


@triton.jit
def _merge_splits_kernel(
    max_ptr,
    sum_ptr,
    acc_ptr,
    out_ptr,
    stride_ob,
    stride_oh,
    NUM_HEADS: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)
    real = splits < NUM_SPLITS
    rows = (seq * NUM_HEADS + head) * NUM_SPLITS + splits
    maxes = tl.load(max_ptr + rows, mask=real, other=float("-inf"))
    sums = tl.load(sum_ptr + rows, mask=real, other=0.0)
    dims = tl.arange(0, HEAD_DIM)
    accs = tl.load(acc_ptr + rows[:, None] * HEAD_DIM + dims[None, :], mask=real[:, None], other=0.0)
    # Empty splits have max -inf: their weight is exp2(-inf) = 0. Every sequence has >= 1 position.
    weights = tl.exp2(maxes - tl.max(maxes, 0))
    out = tl.sum(accs * weights[:, None], 0) / tl.sum(sums * weights, 0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


def supports_head_dim(head_dim: int) -> bool:
    """The kernels tile the head dimension whole: a power of two of at least 16 (tl.dot's minimum)."""
    return head_dim >= 16 and head_dim & (head_dim - 1) == 0


def store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor
) -> None:
    """Write k/v [T, Hkv, D] into their cache slots; rows whose slot is negative are skipped."""
    if k.shape[0] == 0:
        return
    k, v = _rows_contiguous(k), _rows_contiguous(v)
    row = k.shape[1] * k.shape[2]
    _store_kv_kernel[(k.shape[0],)](
        k, v, k_cache, v_cache, slots, k.stride(0), v.stride(0), ROW=row, ROW_PAD=triton.next_power_of_2(row)
    )


def num_splits(batch: int, num_kv_heads: int, device: torch.device, max_context: int | None = None) -> int:
    """Enough programs to fill the GPU twice over, never more splits than the longest context has tiles."""
    programs = batch * num_kv_heads
    splits = min(MAX_SPLITS, -(-2 * _multiprocessors(device) // programs))
    if max_context is not None:
        splits = min(splits, -(-max_context // TILE))
    return max(1, splits)


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    splits: int,
    *,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """One query per sequence, q [B, H, D], over its first context_lens[b] cached positions -> [B, H, D];
    with a window, over only the last `window` of them; with softcap, scores soft-capped (eager.py).

    block_table [B, W] int32 holds at least ceil(context_len / block_size) blocks per row; context_lens
    [B] int32 must be >= 1 (a captured padding row uses 1, and reads block 0's first slot harmlessly).
    """
    batch, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    if q.stride(2) != 1:
        q = q.contiguous()
    out = torch.empty_like(q)
    if batch == 0:
        return out
    if splits > 1:
        partial = torch.empty((batch, num_heads, splits), dtype=torch.float32, device=q.device)
        maxes, sums = partial, torch.empty_like(partial)
        accs = torch.empty((batch, num_heads, splits, head_dim), dtype=torch.float32, device=q.device)
    else:  # unused by the single-split kernel
        maxes = sums = accs = out
    _paged_decode_kernel[(batch, num_kv_heads, splits)](
        q,
        k_cache,
        v_cache,
        block_table,
        context_lens,
        out,
        maxes,
        sums,
        accs,
        scale * LOG2E,  # the kernel uses exp2
        window or 0,
        scale / softcap if softcap else 0.0,
        softcap * LOG2E if softcap else 0.0,
        q.stride(0),
        q.stride(1),
        block_table.stride(0),
        out.stride(0),
        out.stride(1),
        NUM_KV_HEADS=num_kv_heads,
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        TILE_N=TILE,
        NUM_SPLITS=splits,
        # fp32 caches get exact products, not the tensor cores' tf32 (bf16 and fp16 ignore this).
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else None,
        SOFTCAP=bool(softcap),
    )
    if splits > 1:
        _merge_splits_kernel[(batch, num_heads)](
            maxes,
            sums,
            accs,
            out,
            out.stride(0),
            out.stride(1),
            NUM_HEADS=num_heads,
            NUM_SPLITS=splits,
            SPLITS_PAD=triton.next_power_of_2(splits),
            HEAD_DIM=head_dim,
        )
    return out


def _rows_contiguous(x: torch.Tensor) -> torch.Tensor:
    """Each token's heads must sit back to back (a view from a fused QKV output already does)."""
    if x.stride(2) == 1 and x.stride(1) == x.shape[2]:
        return x
    return x.contiguous()


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4  # the CPU interpreter (tests): small, so splitting is exercised too
