"""How long one decode step's weight read takes on this CPU, per weight format and batch size.

    MOONCAKE_CPU_THREADS=1 python -m bench.weight_stream [--batch 1 16] [--repeat 5]

Decode on CPU is bound by reading every weight once per step, so this is the floor under a step and the
first thing to check when a benchmark moves: a VM's memory bandwidth changes with its neighbours. It
times the linears of SmolLM2-135M's shapes (30 layers x QKV, O, gate_up, down, plus the LM head) with
random weights in each format (bf16-tiles: our AMX tile kernel, on CPUs with AMX), the default model's own
weights (its dense bf16 method: tiles on AMX, else oneDNN-packed; and as served: its GGUF blocks for
batches of up to 16 rows), and a plain copy for bandwidth.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

LAYERS = 30
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # (out, in): QKV, O, gate_up, down
HEAD = (49152, 576)
INT4_GROUP = 32  # the GGUF's Q4_1 block size


def timed(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: first-touch and kernel selection
    started = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - started) / repeat * 1e3


def shapes() -> list[tuple[int, int]]:
    return [shape for _ in range(LAYERS) for shape in SHAPES] + [HEAD]


def linear_runner(fmt: str, batch: int) -> Callable[[], object]:
    gen = torch.Generator().manual_seed(0)
    dtype = torch.float32 if fmt == "fp32" else torch.bfloat16
    inputs = {k: torch.randn(batch, k, generator=gen).to(dtype) for k in {k for _, k in shapes()}}
    calls: list[Callable[[], object]] = []
    for out_features, in_features in shapes():
        x = inputs[in_features]
        if fmt == "int4":
            q = torch.randint(0, 16, (out_features, in_features), dtype=torch.int32, generator=gen)
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
            scales = torch.randn(in_features // INT4_GROUP, out_features, 2, generator=gen).bfloat16()
            calls.append(
                lambda x=x, p=packed, s=scales: torch.ops.aten._weight_int4pack_mm_for_cpu(
                    x, p, INT4_GROUP, s
                )
            )
            continue
        weight = torch.randn(out_features, in_features, generator=gen).to(dtype)
        if fmt == "bf16-packed":
            from inference.models.quantization.onednn import pack_weight, packed_linear

            w = pack_weight(weight)
            calls.append(lambda x=x, w=w: packed_linear(x, w, None))
        elif fmt == "bf16-tiles":
            from inference.models.quantization.amx_tiles import pack_tiles, tile_linear

            t = pack_tiles(weight)
            calls.append(lambda x=x, t=t: tile_linear(x, t, None))
        else:
            calls.append(lambda x=x, w=weight: F.linear(x, w))

    def run() -> None:
        for call in calls:
            call()

    return run


def load_default() -> Any:
    from inference.models.layers.linear import Linear
    from inference.models.loader.load import load_model
    from inference.models.quantization.amx_tiles import TileMethod
    from inference.models.quantization.onednn import PackedMethod

    model = load_model("default", dtype="bfloat16", device="cpu").model
    dense_bf16 = (PackedMethod, TileMethod)
    if not any(isinstance(m, Linear) and isinstance(packed(m.method), dense_bf16) for m in model.modules()):
        raise SystemExit("the default model did not pack here (no AMX / AVX512-BF16): nothing to time")
    return model


def packed(method: Any) -> Any:
    """The dense bf16 method a layer uses for large batches (a GGUF-decode method's fallback)."""
    return getattr(method, "fallback", method)


def model_runner(model: Any, batch: int, *, q4_decode: bool) -> Callable[[], object]:
    """The default model's own projections and head; with q4_decode, as the engine runs them (small
    batches read the GGUF's Q4_1/Q8_0 blocks), else all through the dense bf16 weights."""
    from inference.models.layers.linear import Linear

    linears = [m for m in model.modules() if isinstance(m, Linear)]
    inputs = {m.in_features: torch.randn(batch, m.in_features).bfloat16() for m in linears}
    embedding = model.model.embed_tokens.weight

    def run() -> None:
        for m in linears:
            if q4_decode:
                m(inputs[m.in_features])
            else:
                packed(m.method).apply(inputs[m.in_features], m.weight, m.bias)
        if q4_decode:
            model.compute_logits(inputs[HEAD[1]])
        else:
            packed(model.tied_head).apply(inputs[HEAD[1]], embedding, None)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    from inference.device import cpu_thread_count

    # A bench script, not the engine: it may follow the server's MOONCAKE_CPU_THREADS itself.
    torch.set_num_threads(cpu_thread_count(int(os.environ.get("MOONCAKE_CPU_THREADS") or 0) or None))
    src = torch.ones(128 << 20)
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src), args.repeat)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"copy_ of 512 MiB: {2 * src.numel() * 4 / copy_ms / 1e6:.1f} GB/s (read + write)\n")
    from inference.cache_dir import DEFAULT_CACHE_DIR
    from inference.models.quantization.amx_tiles import cpu_has_amx, load_tiles

    formats = ["fp32", "bf16", "bf16-packed", "int4"]
    if cpu_has_amx() and load_tiles(DEFAULT_CACHE_DIR):
        formats.insert(3, "bf16-tiles")
    print("| weights | " + " | ".join(f"batch {b} (ms)" for b in args.batch) + " |")
    print("|---|" + "---:|" * len(args.batch))
    with torch.inference_mode():
        for fmt in formats:
            cells = [f"{timed(linear_runner(fmt, b), args.repeat):.1f}" for b in args.batch]
            print(f"| random, {fmt} | " + " | ".join(cells) + " |", flush=True)
        model = load_default()
        for label, q4 in (("dense bf16", False), ("as served (its GGUF blocks for <= 16 rows)", True)):
            cells = [f"{timed(model_runner(model, b, gguf_kernels=q4), args.repeat):.1f}" for b in args.batch]
            print(f"| default model, {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
