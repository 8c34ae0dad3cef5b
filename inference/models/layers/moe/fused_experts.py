"""Fused mixture-of-experts forward on the GPU: a Triton grouped GEMM over the (token, expert) pairs.

The T*top_k pairs are ordered by expert and each expert's run padded to the row block (BLOCK_M), so one
launch computes silu(x @ gate.T) * (x @ up.T) for every block of every expert and a second launch the down
projection, scaled by the routing weight; the top_k rows of each token are then summed. Everything runs on
the device with shape-derived grid sizes (the grid covers the worst-case padding and idle blocks return at
once), so nothing waits on the host and a decode step that calls it can be captured in a CUDA graph.

`moe_reference` is the plain per-expert loop: the tests' oracle and the fallback where `supports` is False.
Off CUDA the kernels run only in Triton's CPU interpreter (TRITON_INTERPRET=1 before the first import, as
the tests set it), which emulates fp32 and fp16 dots but not bf16 ones.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

import torch
import torch.nn.functional as F

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True, slots=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


def tile_config(num_pairs: int, num_experts: int, dtype: torch.dtype = torch.bfloat16) -> TileConfig:
    """Small row blocks when experts see few tokens each (decode: less padding), larger ones for prefill,
    where a block's weight tile is then read once for more rows."""
    if num_pairs <= 16 * num_experts:
        # fp32 halves the K step: at 128, 3 stages of the gated kernel's tiles would take 216 KiB of an
        # H100/H200's 227 KiB of shared memory.
        block_k = 128 if dtype.itemsize <= 2 else 64
        return TileConfig(block_m=16, block_n=64, block_k=block_k, group_m=1, num_warps=4, num_stages=3)
    return TileConfig(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=3)


def supports(x: torch.Tensor, w_gate_up: torch.Tensor) -> bool:
    """True where fused_moe can run: CUDA (or the CPU interpreter, without bf16), matching float dtypes,
    x [T, H] against w_gate_up [E, 2*I, H] on the same device."""
    if x.dtype not in _DTYPES or w_gate_up.dtype != x.dtype or x.device != w_gate_up.device:
        return False
    if x.dim() != 2 or w_gate_up.dim() != 3 or w_gate_up.shape[2] != x.shape[1] or w_gate_up.shape[1] % 2:
        return False
    if x.device.type == "cuda":
        return _triton_installed()
    return x.device.type == "cpu" and x.dtype != torch.bfloat16 and _interpreted()


def fused_moe(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """x [T, H]; w_gate_up [E, 2*I, H] (gate rows, then up rows); w_down [E, H, I]; topk_weights [T, k]
    (already normalised); topk_ids [T, k] -> [T, H] in x.dtype. Accumulates in fp32."""
    from inference.models.layers.moe.triton_kernels import _expert_gemm_kernel

    num_tokens, hidden = x.shape
    num_experts, inter = w_gate_up.shape[0], w_gate_up.shape[1] // 2
    top_k = topk_ids.shape[1]
    num_pairs = num_tokens * top_k
    if num_pairs == 0:
        return x.new_zeros(num_tokens, hidden)
    config = tile_config(num_pairs, num_experts, x.dtype)
    block_m = config.block_m
    sorted_pairs, block_experts, total = align_pairs(topk_ids, num_experts, block_m)
    num_blocks = block_experts.shape[0]
    device = x.device

    weights = topk_weights.reshape(-1).to(torch.float32).contiguous()

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, n_out: int, *, first: bool) -> None:
        n_blocks = -(-n_out // config.block_n)
        _expert_gemm_kernel[(num_blocks * n_blocks,)](
            a,
            b,
            c,
            weights,
            sorted_pairs,
            block_experts,
            total,
            num_pairs,
            num_blocks,
            n_out,
            a.shape[1],
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            b.stride(2),
            c.stride(0),
            c.stride(1),
            A_ROW_DIV=top_k if first else 1,
            GATED=first,
            WEIGHTED=not first,
            BLOCK_M=block_m,
            BLOCK_N=config.block_n,
            BLOCK_K=config.block_k,
            GROUP_M=config.group_m,
            # fp32 weights get exact products, not the tensor cores' tf32 (fp16 and bf16 ignore this).
            DOT_PRECISION="ieee" if x.dtype == torch.float32 else None,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
        )

    # The activations between the two GEMMs take x's dtype: the down projection's dot needs it.
    act = torch.empty(num_pairs, inter, dtype=x.dtype, device=device)
    launch(x, w_gate_up, act, inter, first=True)
    per_pair = torch.empty(num_pairs, hidden, dtype=torch.float32, device=device)
    launch(act, w_down, per_pair, hidden, first=False)
    return per_pair.view(num_tokens, top_k, hidden).sum(dim=1).to(x.dtype)


def align_pairs(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The T*k pairs (pair p = token p // k, its (p % k)-th expert) ordered by expert, each expert's run
    padded to a multiple of block_m with the id T*k -> (sorted pairs, the expert of each block_m rows or -1
    past the end, the padded length [1]). Buffers are sized for the worst padding; slots past the padded
    length are left unwritten."""
    from inference.models.layers.moe.triton_kernels import _align_kernel

    num_pairs = topk_ids.numel()
    # At most min(pairs, experts) experts are hit, each padding by fewer than block_m rows.
    num_blocks = -(-(num_pairs + min(num_pairs, num_experts) * (block_m - 1)) // block_m)
    device = topk_ids.device
    sorted_pairs = torch.empty(num_blocks * block_m, dtype=torch.int32, device=device)
    block_experts = torch.empty(num_blocks, dtype=torch.int32, device=device)
    total = torch.empty(1, dtype=torch.int32, device=device)
    experts_pad = max(16, _next_power_of_2(num_experts))
    _align_kernel[(1,)](
        topk_ids.reshape(-1).contiguous(),
        sorted_pairs,
        block_experts,
        total,
        num_pairs,
        num_blocks,
        BLOCK_M=block_m,
        EXPERTS_PAD=experts_pad,
        # The one-hot tile [CHUNK, EXPERTS_PAD] stays at 4096 entries, a few registers per thread.
        CHUNK=max(16, min(_next_power_of_2(num_pairs), 4096 // experts_pad)),
    )
    return sorted_pairs, block_experts, total


def moe_reference(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """fused_moe's arguments and result, by one F.linear per expert over the tokens routed to it; the
    routing weight and the sum over top_k in fp32. Reads the expert counts on the host."""
    num_tokens, top_k = topk_ids.shape
    inter = w_down.shape[2]
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w_gate_up.shape[0]).tolist()
    weights = topk_weights.reshape(-1).to(torch.float32)
    out = torch.zeros(num_tokens, x.shape[1], dtype=torch.float32, device=x.device)
    for expert, pairs in enumerate(order.split(counts)):
        if pairs.numel() == 0:
            continue
        tokens = pairs // top_k
        gate, up = F.linear(x[tokens], w_gate_up[expert]).to(torch.float32).split(inter, dim=-1)
        act = (F.silu(gate) * up).to(x.dtype)
        down = F.linear(act, w_down[expert]).to(torch.float32)
        out.index_add_(0, tokens, down * weights[pairs, None])
    return out.to(x.dtype)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def _interpreted() -> bool:
    """Whether the kernels were defined for Triton's CPU interpreter (it is chosen at definition time)."""
    if not _triton_installed():
        return False
    from triton.runtime.interpreter import InterpretedFunction

    from inference.models.layers.moe.triton_kernels import _align_kernel

    return isinstance(_align_kernel, InterpretedFunction)
