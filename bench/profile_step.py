"""Where LLMEngine.step spends its time on serving load (a): 32 chat prompts, greedy, max_tokens 128.

    python -m bench.profile_step [--num-prompts 32] [--max-tokens 128] [--torch-steps 20] [--top 25]

Three views, all offline (no web server): the step split into schedule / execute / postprocess (wall time
per phase, summed over the run); cProfile's top functions by own time; torch.profiler's top operators over
`--torch-steps` steps taken in the middle of the decode phase.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from bench.prompts import chat_prompt_ids


class PhaseTimer:
    """Wraps the three parts of LLMEngine.step to add up their wall time."""

    def __init__(self, engine: Any) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.steps = 0
        self.decode_only_steps = 0
        self.engine = engine

    def step(self) -> list[Any]:
        engine = self.engine
        t0 = time.perf_counter()
        scheduled = engine.scheduler.schedule()
        t1 = time.perf_counter()
        logits = engine.runner.execute(scheduled.chunks) if not scheduled.is_empty else None
        t2 = time.perf_counter()
        outputs: list[Any] = engine._postprocess(scheduled, logits)
        t3 = time.perf_counter()
        self.totals["schedule"] += t1 - t0
        self.totals["execute"] += t2 - t1
        self.totals["postprocess (sample, stop, detok)"] += t3 - t2
        self.steps += 1
        if all(chunk.num_tokens == 1 for chunk in scheduled.chunks):
            self.decode_only_steps += 1
        return outputs


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--torch-steps", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--max-num-seqs", type=int, default=16, help="16 = the serving load's concurrency")
    p.add_argument("--model", default="default", help="a model id, folder or GGUF file")
    p.add_argument("--dtype", default="auto", help="the engine's dtype (auto = float32 on CPU)")
    args = p.parse_args(argv)

    import torch

    from inference import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(
        EngineConfig(model=args.model, dtype=args.dtype, max_num_seqs=args.max_num_seqs, max_model_len=2048)
    )
    dtype = engine.loaded.dtype
    print(f"torch {torch.__version__}, intra-op threads {torch.get_num_threads()}, {dtype}", flush=True)
    prompts = chat_prompt_ids(engine.tokenizer, args.num_prompts)
    engine.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4))  # warm-up
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)

    # 1) phases
    timer = PhaseTimer(engine)
    for prompt in prompts:
        engine.add_request(None, prompt, params)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    while engine.has_unfinished_requests():
        timer.step()
    profiler.disable()
    elapsed = time.perf_counter() - started
    generated = args.num_prompts * args.max_tokens
    rate = generated / elapsed
    print(f"\n{args.num_prompts} prompts x {args.max_tokens} tokens: {elapsed:.2f}s, {rate:.1f} tok/s")
    per_step = 1000 * elapsed / timer.steps
    print(f"{timer.steps} steps ({timer.decode_only_steps} decode-only), {per_step:.1f} ms/step")
    for name, total in timer.totals.items():
        share = f"{total:8.2f}s  {100 * total / elapsed:5.1f}%  {1000 * total / timer.steps:7.2f} ms/step"
        print(f"  {name:<36}{share}")

    # 2) Python functions by own time (profiling overhead inflates small Python calls; read it as ranks)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.top)
    print("\ncProfile, top by own time:")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])

    # 3) operators during steady decode
    for prompt in prompts[: args.max_num_seqs]:
        engine.add_request(None, prompt, params)
    for _ in range(8):  # past the prefills
        engine.step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(args.torch_steps):
            engine.step()
    while engine.has_unfinished_requests():
        engine.step()
    print(f"\ntorch.profiler, {args.torch_steps} decode steps at batch {args.max_num_seqs}, top by self CPU:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
