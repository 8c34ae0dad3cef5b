"""Fused MoE on CUDA: the Triton grouped GEMM (inference/models/layers/moe/fused_experts.py) against the
per-expert reference, in bf16 at OLMoE's shape (hidden 2048, expert width 1024, 64 experts, top 8).

    python -m bench.gpu_moe              # needs CUDA and Triton; ~15 s on an H200, most of it compiling
    python -m bench.gpu_kernels --moe    # the same, as the kernel check's MoE section alone
    python -m bench.gpu_moe --smoke      # a tiny fp32 shape in Triton's CPU interpreter: the plumbing only

Errors (err) are max |difference| against the bf16 reference and against the reference run on fp32 copies of
the same weights (the truth both are rounded from); the verdict uses the relative norm error against the
latter. Times are medians of `triton.testing.do_bench` (on CPU: one call, after the checked ones); GB/s counts
the weights of the experts the batch hits, each read once.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class MoeShape:
    hidden: int
    inter: int
    experts: int
    top_k: int


OLMOE = MoeShape(hidden=2048, inter=1024, experts=64, top_k=8)
SMOKE = MoeShape(hidden=48, inter=32, experts=8, top_k=2)
Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def make_weights(shape: MoeShape, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device).manual_seed(0)
    w_gate_up = torch.randn(
        shape.experts, 2 * shape.inter, shape.hidden, device=device, dtype=dtype, generator=gen
    )
    w_down = torch.randn(shape.experts, shape.hidden, shape.inter, device=device, dtype=dtype, generator=gen)
    return w_gate_up.mul_(shape.hidden**-0.5), w_down.mul_(shape.inter**-0.5)


def make_routing(
    shape: MoeShape, tokens: int, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x and OLMoE-style routing: softmax over the experts, the top k kept without renormalising."""
    gen = torch.Generator(device=device).manual_seed(tokens)
    x = torch.randn(tokens, shape.hidden, device=device, dtype=dtype, generator=gen)
    logits = torch.randn(tokens, shape.experts, device=device, generator=gen)
    weights, ids = logits.softmax(-1).topk(shape.top_k, dim=-1)
    return x, weights, ids


def time_ms(fn: Callable[[], object], device: str) -> float:
    if device == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def check_moe(
    shape: MoeShape = OLMOE,
    token_counts: Sequence[int] = (1, 16, 256),
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
) -> list[str]:
    """Print one table row per batch size; return the failures."""
    from inference.models.layers.moe.fused_experts import (
        align_pairs,
        fused_moe,
        moe_reference,
        supports,
        tile_config,
    )

    w_gate_up, w_down = make_weights(shape, dtype, device)
    exact_weights = (w_gate_up.float(), w_down.float())
    expert_bytes = (w_gate_up[0].numel() + w_down[0].numel()) * w_gate_up.element_size()
    limit = 1e-2 if dtype != torch.float32 else 1e-5
    failures = []
    print(f"\n### Fused MoE, {dtype}, {shape}\n")
    print(
        "| tokens | row block | err vs ref | vs fp32 | ref vs fp32 "
        "| fused µs | of which align µs | GB/s | ref µs | speed-up |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for tokens in token_counts:
        x, weights, ids = make_routing(shape, tokens, dtype, device)
        inputs: Inputs = (x, w_gate_up, w_down, weights, ids)
        if not supports(x, w_gate_up):
            failures.append(f"moe: fused_moe does not support {dtype} on {device}")
            break
        out = fused_moe(*inputs)
        ref = moe_reference(*inputs)
        exact = moe_reference(x.float(), *exact_weights, weights, ids)
        rel = ((out.float() - exact).norm() / exact.norm()).item()
        ok = rel < limit and bool(torch.isfinite(out).all())
        block_m = tile_config(ids.numel(), shape.experts, dtype).block_m
        fused_ms = time_ms(functools.partial(fused_moe, *inputs), device)
        align_ms = time_ms(functools.partial(align_pairs, ids, shape.experts, block_m), device)
        ref_ms = time_ms(functools.partial(moe_reference, *inputs), device)
        hit = ids.unique().numel()
        print(
            f"| {tokens} | {block_m} "
            f"| {(out.float() - ref.float()).abs().max().item():.2e} "
            f"| {(out.float() - exact).abs().max().item():.2e}{'' if ok else f' FAIL (rel {rel:.1e})'} "
            f"| {(ref.float() - exact).abs().max().item():.2e} "
            f"| {fused_ms * 1e3:.0f} | {align_ms * 1e3:.0f} | {hit * expert_bytes / fused_ms / 1e6:.0f} "
            f"| {ref_ms * 1e3:.0f} | {ref_ms / fused_ms:.1f}x |"
        )
        if not ok:
            failures.append(f"moe tokens={tokens}: relative error {rel:.2e}")
    return failures


def main(argv: Sequence[str] = ()) -> int:
    if "--smoke" in argv:
        # Before the first import of the kernels: the interpreter is chosen when they are defined.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        return 1 if check_moe(SMOKE, (1, 5), "cpu", torch.float32) else 0
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    return 1 if check_moe() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
