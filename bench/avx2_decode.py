"""Single-stream decode on the AVX2 block path (fp32 activations, `cpu_isa: avx2` on any CPU with AVX2): ms a
step through the fused layer stack (csrc/avx2/decode_layers.cpp) and through the modules, alternated round by
round, every run printed, with the greedy tokens of the two compared.

    python -m bench.avx2_decode [--model default] [--rounds 3] [--tokens 64] [--threads 2]

Beside them, the weight-read bound: the bytes of weights a token reads (projections and head) over this
machine's copy rate (a 512 MiB copy_, read + write, as bench/weight_stream.py measures it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch


def copy_rate(repeat: int = 5) -> float:
    """GB/s of a 512 MiB copy_ (bytes read + written), the best of `repeat`."""
    src = torch.ones(128 << 20)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() * 4 / best / 1e9


def decode_steps(engine: Any, prompt: list[int], tokens: int) -> tuple[list[float], list[int]]:
    """ms of each decode step after the prompt's, and the greedy tokens."""
    from inference import SamplingParams

    engine.add_request(None, prompt, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
    engine.step()  # the prompt
    times: list[float] = []
    out: list[int] = []
    while engine.has_unfinished_requests():
        started = time.perf_counter()
        for finished in engine.step():
            if finished.finished:
                out = list(finished.outputs[0].token_ids)
        times.append(1000 * (time.perf_counter() - started))
    return times, out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="default", help="a model id, folder or GGUF file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="the engine's cpu_threads")
    args = parser.parse_args(argv)

    from bench.prompts import chat_prompt_ids
    from inference import EngineConfig, LLMEngine

    engine = LLMEngine(
        EngineConfig(
            model=args.model,
            dtype="auto",
            cpu_isa="avx2",
            max_num_seqs=1,
            max_model_len=2048,
            cpu_threads=args.threads,
        )
    )
    runner = engine.runner
    stack = getattr(runner, "fused_decode", None)
    if stack is None:
        print("the fused stack is not in use for this model (see the load's log)")
        return 1
    rate = copy_rate()
    weights = engine.loaded.model.weight_bytes()
    bound = weights / (rate * 1e9) * 1000
    kv = str(getattr(runner, "kv_dtype", "?")).removeprefix("torch.")
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} thread(s), {engine.loaded.dtype}, KV cache {kv}")
    print(
        f"weights read a token: {weights / 1e6:.1f} MB; copy_ {rate:.1f} GB/s; bound {bound:.2f} ms a token"
    )
    prompt = chat_prompt_ids(engine.tokenizer, 1)[0]
    modes = {"modules": None, "fused": stack}
    for value in modes.values():  # warm-up, each path once
        runner.fused_decode = value
        decode_steps(engine, prompt, 4)
    answers: dict[str, list[int]] = {}
    print("\n| round | path | mean ms/step | median | min | steps |")
    print("|---:|---|---:|---:|---:|---:|")
    for round_ in range(1, args.rounds + 1):
        for mode, value in modes.items():
            runner.fused_decode = value
            times, tokens = decode_steps(engine, prompt, args.tokens)
            answers.setdefault(mode, tokens)
            cells = f"{statistics.mean(times):.2f} | {statistics.median(times):.2f} | {min(times):.2f}"
            print(f"| {round_} | {mode} | {cells} | {len(times)} |", flush=True)
    runner.fused_decode = stack
    print(f"\ngreedy tokens equal: {answers['modules'] == answers['fused']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
