"""Stall probe: how long running streams wait for their next token while long prompts prefill.

Usage: python -m bench.stall_probe [--streams 3] [--long 8000] [--num-long 1] [--targets off,250]
       [--dtype auto] [--device cpu] [--json]

Loads the default model once, then for each `max_step_latency_ms` in --targets ("off" = None) builds an
LLMEngine over it and drives it in a loop: --streams chat streams decode (ignore_eos), then --num-long
prompts of --long random tokens arrive at once (max_tokens=1). The first stream is the probe; its gaps
between tokens from the injection until every long prompt has its first token (plus --tail-steps) are
the figures: median, p90, largest, and how many exceed 0.5 s, with the long prompts' time to first token.
Threads follow MOONCAKE_CPU_THREADS like the server. Numbers move with machine load: compare off and on
from the same run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from typing import Any

from bench.prompts import chat_prompt_ids


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def probe(loaded: Any, args: argparse.Namespace, target_ms: float | None) -> dict[str, Any]:
    from inference import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(
        EngineConfig(
            model="default",
            dtype=args.dtype,
            device=args.device,
            max_model_len=args.max_model_len,
            max_num_batched_tokens=args.max_num_batched_tokens,
            kv_cache_memory_bytes=args.kv_cache_mib << 20,
            enable_prefix_caching=False,
            max_step_latency_ms=target_ms,
        ),
        loaded=loaded,
    )
    engine.generate(chat_prompt_ids(engine.tokenizer, 2), SamplingParams(temperature=0, max_tokens=4))  # warm
    streams = [
        engine.add_request(f"stream-{i}", p, SamplingParams(temperature=0, max_tokens=4000, ignore_eos=True))
        for i, p in enumerate(chat_prompt_ids(engine.tokenizer, args.streams))
    ]
    probe_times: list[float] = []

    def step() -> list[Any]:
        outputs = engine.step()
        now = time.perf_counter()
        if any(o.request_id == streams[0] for o in outputs):
            probe_times.append(now)
        return outputs

    for _ in range(args.warm_steps):
        step()
    before = [b - a for a, b in itertools.pairwise(probe_times)]
    rng = random.Random(args.seed)
    vocab = len(engine.tokenizer)
    injected = time.perf_counter()
    probe_times = [probe_times[-1]]
    pending = set()
    for i in range(args.num_long):
        prompt = [rng.randrange(100, vocab - 100) for _ in range(args.long)]
        pending.add(engine.add_request(f"long-{i}", prompt, SamplingParams(temperature=0, max_tokens=1)))
    ttft: list[float] = []
    steps = 0
    while pending:
        for out in step():
            if out.request_id in pending and out.outputs[0].token_ids:
                pending.discard(out.request_id)
                ttft.append(time.perf_counter() - injected)
        steps += 1
    for _ in range(args.tail_steps):
        step()
    for request_id in streams:
        engine.abort_request(request_id)
    engine.step()
    gaps = [b - a for a, b in itertools.pairwise(probe_times)]
    cost = engine.scheduler.cost
    return {
        "max_step_latency_ms": target_ms,
        "gap_before_median_s": statistics.median(before) if before else None,
        "gap_median_s": statistics.median(gaps),
        "gap_p90_s": percentile(gaps, 0.9),
        "gap_max_s": max(gaps),
        "gaps_over_0.5s": sum(g > 0.5 for g in gaps),
        "probe_tokens": len(gaps),
        "long_ttft_s": [round(t, 2) for t in ttft],
        "steps_to_prefill": steps,
        "est_fixed_ms": None if cost.fixed_s is None else round(cost.fixed_s * 1000, 1),
        "est_prefill_ms_per_token": None if cost.per_token_s is None else round(cost.per_token_s * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=3)
    parser.add_argument("--long", type=int, default=8000, help="tokens per long prompt")
    parser.add_argument("--num-long", type=int, default=1)
    parser.add_argument("--targets", default="off,250", help="comma list of max_step_latency_ms; off = None")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--max-num-batched-tokens", type=int, default=4096)
    parser.add_argument("--kv-cache-mib", type=int, default=2048)
    parser.add_argument("--warm-steps", type=int, default=8)
    parser.add_argument("--tail-steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from inference.models.loader.load import load_model

    loaded = load_model("default", dtype=args.dtype, device=args.device)
    results = []
    for raw in args.targets.split(","):
        target = None if raw.strip().lower() in ("off", "none", "0") else float(raw)
        result = probe(loaded, args, target)
        results.append(result)
        if not args.json:
            print(
                f"target={'off' if target is None else f'{target:g} ms'}: probe gap median "
                f"{result['gap_median_s'] * 1000:.0f} ms (before injection "
                f"{(result['gap_before_median_s'] or 0) * 1000:.0f} ms), "
                f"p90 {result['gap_p90_s'] * 1000:.0f} ms, "
                f"max {result['gap_max_s']:.2f} s, {result['gaps_over_0.5s']} gaps > 0.5 s over "
                f"{result['probe_tokens']} tokens; long TTFT {result['long_ttft_s']} s in "
                f"{result['steps_to_prefill']} steps; est fixed {result['est_fixed_ms']} ms, "
                f"prefill {result['est_prefill_ms_per_token']} ms/token",
                flush=True,
            )
    if args.json:
        print(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
