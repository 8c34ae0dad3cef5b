"""Expert-parallel dispatch, simulated on routing traces: how even the experts' work is across devices and
how many bytes the all-to-all moves, per step, for a placement of the experts
(docs/design/expert-parallel.md).

    python -m bench.ep_sim                     # OLMoE-1B-7B and Qwen3-30B-A3B shapes, synthetic traces
    python -m bench.ep_sim --trace FILE.npz    # replay a recorded trace (format: bench/ep_trace.py)
    python -m bench.ep_sim --record FILE.npz   # record one from our engine's MoE layers (tiny random model)

No real weights exist on this machine, so the default traces are synthetic: logits with a stated skew
(ep_trace.Skew) through our router, `inference.models.layers.moe.layer.route`. Accounting, per step of N
tokens and per
MoE layer: the step's tokens live on the devices in equal contiguous slices (their "home"); a (token,
expert) pair runs on the home device if it holds that expert, else on one of the expert's replicas (chosen
by pair index). A token is sent to a remote device once however many of its experts live there, and that
device returns one partial sum (dispatch + combine: 2 x hidden x 2 bytes in bf16). Imbalance is the step's
sum over layers of the busiest device's pairs over the sum of the mean: the step's expert time relative to
perfect balance, as every layer's all-to-all waits for its slowest device.
"""

from __future__ import annotations

import argparse
import heapq
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.ep_trace import IntArray, Skew, Trace, load_trace, record_tiny, save_trace, synthetic_trace

BF16 = 2


@dataclass(frozen=True)
class Shape:
    experts: int
    top_k: int
    layers: int
    hidden: int
    renormalize: bool  # norm_topk_prob in the models' configs (it does not change which experts win)


SHAPES = {
    "OLMoE-1B-7B": Shape(64, 8, 16, 2048, renormalize=False),
    "Qwen3-30B-A3B": Shape(128, 8, 48, 2048, renormalize=True),
}


@dataclass(frozen=True)
class Placement:
    name: str
    num_devices: int
    replicas: list[list[int]]  # expert -> the devices holding a copy

    def tables(self) -> tuple[npt.NDArray[np.bool_], IntArray, IntArray]:
        """holds [devices, experts], replica devices [experts, max replicas] (padded), replica counts."""
        experts = len(self.replicas)
        holds = np.zeros((self.num_devices, experts), dtype=bool)
        width = max(len(r) for r in self.replicas)
        devices = np.zeros((experts, width), dtype=np.int64)
        for expert, where in enumerate(self.replicas):
            holds[where, expert] = True
            devices[expert, : len(where)] = where
        return holds, devices, np.array([len(r) for r in self.replicas], dtype=np.int64)


def round_robin(experts: int, devices: int) -> Placement:
    """Expert e on device e mod D (with more devices than experts, each expert on every E-th device)."""
    if devices <= experts:
        return Placement("round-robin", devices, [[e % devices] for e in range(experts)])
    return Placement("round-robin", devices, [list(range(e, devices, experts)) for e in range(experts)])


def balanced(loads: npt.NDArray[np.float64], devices: int, spare_slots: int) -> Placement:
    """Placement from observed per-expert load: every device gets ceil(E/D) + spare_slots expert slots; the
    spare slots go to more copies of the hottest experts (largest load per copy first, at most one copy per
    device), then copies are packed heaviest first onto the least-loaded device with a free slot."""
    experts = len(loads)
    slots = math.ceil(experts / devices) + spare_slots
    copies = [1] * experts
    heap = [(-float(loads[e]), e) for e in range(experts)]
    heapq.heapify(heap)
    for _ in range(devices * slots - experts):
        while heap and copies[heap[0][1]] >= devices:
            heapq.heappop(heap)
        if not heap:
            break
        _, expert = heapq.heappop(heap)
        copies[expert] += 1
        heapq.heappush(heap, (-float(loads[expert]) / copies[expert], expert))
    items = sorted(
        ((float(loads[e]) / copies[e], e) for e in range(experts) for _ in range(copies[e])), reverse=True
    )
    device_load, free = [0.0] * devices, [slots] * devices
    replicas: list[list[int]] = [[] for _ in range(experts)]
    for share, expert in items:
        open_devices = [d for d in range(devices) if free[d] and d not in replicas[expert]]
        target = min(open_devices, key=lambda d: (device_load[d], d))
        replicas[expert].append(target)
        device_load[target] += share
        free[target] -= 1
    name = f"balanced+{spare_slots} spare" if spare_slots else "balanced"
    return Placement(name, devices, replicas)


def expert_loads(trace: Trace) -> dict[int, npt.NDArray[np.float64]]:
    """Pairs per expert in each layer: every layer's experts are distinct weights, placed on their own."""
    return {
        layer: np.bincount(ids.ravel(), minlength=trace.num_experts).astype(np.float64)
        for layer, ids in trace.layers.items()
    }


def hot_ratio(trace: Trace) -> float:
    """The hottest expert's pairs over the mean, averaged over layers: how skewed the trace is."""
    ratios = [np.bincount(ids.ravel(), minlength=trace.num_experts) for ids in trace.layers.values()]
    return float(np.mean([r.max() / r.mean() for r in ratios]))


def step_order(trace: Trace, decode: bool) -> IntArray:
    """Token indices in the order steps take them: a prefill step takes whole sequences' tokens in turn; a
    decode step takes the same position of many sequences (position-major order)."""
    if not decode:
        return np.arange(trace.num_tokens)
    starts = np.concatenate(([0], np.cumsum(trace.seq_lens)[:-1]))
    seq = np.repeat(np.arange(len(trace.seq_lens)), trace.seq_lens)
    position = np.arange(trace.num_tokens) - starts[seq]
    return np.lexsort((seq, position))


@dataclass(frozen=True)
class Result:
    steps: int
    tokens: int  # per step
    imbalance: float  # sum over layers of the busiest device's pairs / of the mean device's
    bytes_per_step: float  # dispatch + combine, all MoE layers
    local_share: float  # (token, expert) pairs served on the token's home device


def simulate(
    trace: Trace, placements: Mapping[int, Placement], step_tokens: int, hidden: int, *, decode: bool
) -> Result:
    """Every step of `step_tokens` tokens through every MoE layer, each layer's experts where `placements`
    puts them; a partial last step is left out."""
    devices = next(iter(placements.values())).num_devices
    order = step_order(trace, decode)
    tokens = min(step_tokens, len(order))
    steps = len(order) // tokens
    order = order[: steps * tokens]
    k = trace.top_k
    home = (np.arange(tokens) * devices) // tokens
    home_pairs = np.broadcast_to(home[None, :, None], (steps, tokens, k))
    pair_index = np.arange(steps * tokens * k).reshape(steps, tokens, k)
    step_index = np.broadcast_to(np.arange(steps)[:, None, None], (steps, tokens, k))
    busiest, mean = np.zeros(steps), tokens * k / devices * len(trace.layers)
    remote, local = np.zeros(steps), 0
    for layer, ids in trace.layers.items():
        holds, replica_devices, copies = placements[layer].tables()
        expert = ids[order].reshape(steps, tokens, k)
        choice = replica_devices[expert, pair_index % copies[expert]]
        device = np.where(holds[home_pairs, expert], home_pairs, choice)
        load = np.bincount((step_index * devices + device).ravel(), minlength=steps * devices)
        busiest += load.reshape(steps, devices).max(axis=1)
        # Each (token, remote device) once: the token's hidden state goes there, one partial sum comes back.
        present = np.zeros((steps, tokens, devices), dtype=bool)
        present[step_index, np.arange(tokens)[None, :, None], device] = True
        present[:, np.arange(tokens), home] = False
        remote += present.sum(axis=(1, 2))
        local += int((device == home_pairs).sum())
    return Result(
        steps=steps,
        tokens=tokens,
        imbalance=float((busiest / mean).mean()),
        bytes_per_step=float(remote.mean()) * 2 * hidden * BF16,
        local_share=local / (steps * tokens * k * len(trace.layers)),
    )


def warmup_split(trace: Trace, fraction: float) -> tuple[Trace, Trace]:
    """The first `fraction` of the sequences (at least one; a one-sequence trace is cut by tokens first)."""
    if len(trace.seq_lens) == 1:
        cut = max(1, int(trace.num_tokens * fraction))
        trace = Trace(trace.layers, np.array([cut, trace.num_tokens - cut]), trace.num_experts, trace.meta)
    return trace.split(min(len(trace.seq_lens) - 1, max(1, round(len(trace.seq_lens) * fraction))))


def report(name: str, trace: Trace, hidden: int, args: argparse.Namespace) -> list[str]:
    warm, rest = warmup_split(trace, args.warmup)
    loads = expert_loads(warm)
    layers = list(trace.layers)
    source, sequences = trace.meta.get("source", "?"), len(trace.seq_lens)
    lines = [
        f"{name}: {trace.num_experts} experts top-{trace.top_k}, {len(layers)} MoE layers, hidden {hidden}; "
        f"{source} trace, {trace.num_tokens} tokens in {sequences} sequences (warm-up {warm.num_tokens}), "
        f"hottest expert {hot_ratio(rest):.2f}x the mean",
        (
            f"  {'':>4}  {'':<18} "
            + "   ".join(
                f"{kind} {min(n, rest.num_tokens)} tokens".center(23)
                for kind, n in (("decode", args.decode_batch), ("prefill", args.prefill))
            )
        ).rstrip(),
        f"  {'dev':>4}  {'placement':<18} " + "   ".join([f"{'imbal':>5} {'MiB/step':>9} {'local':>7}"] * 2),
    ]
    for devices in args.devices:
        plans = [dict.fromkeys(layers, round_robin(trace.num_experts, devices))]
        for spare in sorted({0, args.spare_slots}):
            plans.append({layer: balanced(loads[layer], devices, spare) for layer in layers})
        for plan in plans:
            cells = []
            for step, decode in ((args.decode_batch, True), (args.prefill, False)):
                r = simulate(rest, plan, step, hidden, decode=decode)
                cells.append(
                    f"{r.imbalance:5.2f} {r.bytes_per_step / 2**20:9.1f} {100 * r.local_share:6.1f}%"
                )
            lines.append(f"  {devices:>4}  {plan[layers[0]].name:<18} " + "   ".join(cells))
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", type=Path, help="replay this trace instead of synthetic ones")
    parser.add_argument("--record", type=Path, help="record a trace from a tiny random OLMoE, save, exit")
    parser.add_argument("--hidden", type=int, default=2048, help="hidden size for --trace's byte counts")
    parser.add_argument("--devices", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--decode-batch", type=int, default=256)
    parser.add_argument("--prefill", type=int, default=8192, help="tokens per prefill step")
    parser.add_argument("--sequences", type=int, default=320)
    parser.add_argument("--length", type=int, default=128, help="tokens per synthetic sequence")
    parser.add_argument("--warmup", type=float, default=0.2, help="share of sequences used for placement")
    parser.add_argument("--spare-slots", type=int, default=1, help="extra expert slots per device (copies)")
    parser.add_argument("--zipf", type=float, default=Skew.zipf)
    parser.add_argument("--noise", type=float, default=Skew.noise)
    parser.add_argument("--rho", type=float, default=Skew.rho)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    if args.record is not None:
        trace = record_tiny(seed=args.seed)
        save_trace(trace, args.record)
        print(f"recorded {len(trace.layers)} MoE layers x {trace.num_tokens} tokens to {args.record}")
        return 0
    if args.trace is not None:
        runs = [(args.trace.name, load_trace(args.trace), args.hidden)]
    else:
        skew = Skew(args.zipf, args.noise, args.rho)
        print(f"synthetic traces: zipf {skew.zipf}, noise {skew.noise}, rho {skew.rho}, seed {args.seed}")
        runs = []
        for name, shape in SHAPES.items():
            trace = synthetic_trace(
                num_experts=shape.experts,
                top_k=shape.top_k,
                num_layers=shape.layers,
                renormalize=shape.renormalize,
                sequences=args.sequences,
                length=args.length,
                skew=skew,
                seed=args.seed,
            )
            runs.append((name, trace, shape.hidden))
    for name, trace, hidden in runs:
        print("\n".join(report(name, trace, hidden, args)))
    print(f"({time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
