"""Options, the loop over models, the summary and the exit status."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import bench.gpu_check as package
from bench.gpu_check.budget import Budget, process_start
from bench.gpu_check.report import ModelReport, Settings, print_header, print_reports, verdict, write_json
from bench.gpu_check.run import run_model
from bench.gpu_check.zoo import SHAPES


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.gpu_check",
        description=package.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--smoke", action="store_true", help="tiny model on CPU, 8 short prompts")
    p.add_argument("--models", default="qwen3-0.6b,llama3-8b")
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--budget-s", type=float, default=420.0, help="wall-clock budget of the whole check")
    p.add_argument("--tie-tol", type=float, default=None, help="HF logit gap treated as a tie")
    # Not 0.9: without flash-attn our torch backend gathers each decode row's K/V (GBs at 256 x 2k tokens),
    # and that working set is not part of the engine's memory profiling step. HF gets the same share.
    p.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    p.add_argument("--eager", action="store_true", help="our engine without CUDA graphs (enforce_eager)")
    p.add_argument(
        "--sync-steps", action="store_true", help="our engine without async scheduling (one step at a time)"
    )
    p.add_argument(
        "--bandwidth-gbs",
        type=float,
        default=None,
        help="device copy bandwidth (GB/s, read + write) for the memory-bound floor; default: H200's "
        "4300 on CUDA, measured on CPU",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--oracle-only", action="store_true", help="skip both throughput runs")
    p.add_argument(
        "--json", dest="json_path", help="also write the reports as JSON (rewritten after each model)"
    )
    return p


def parse_settings(args: argparse.Namespace, p: argparse.ArgumentParser) -> tuple[list[str], Settings] | None:
    common: dict[str, Any] = dict(
        budget_s=args.budget_s, seed=args.seed, eager=args.eager, oracle_only=args.oracle_only,
        bandwidth_gbs=args.bandwidth_gbs,
        # --smoke pipelines on the CPU too (off by default there), so the plumbing check covers it.
        async_scheduling=False if args.sync_steps else (True if args.smoke else None),
    )  # fmt: skip
    if args.smoke:
        smoke = Settings(
            device="cpu", dtype="float32", num_prompts=8, input_len=(10, 40), output_len=(10, 40),
            oracle_prompts=4, oracle_tokens=16, tie_tol=1e-4, gpu_memory_utilization=0.9, **common,
        )  # fmt: skip
        return ["tiny-llama"], smoke
    if not torch.cuda.is_available():
        print("no CUDA device: run with --smoke for the CPU plumbing check", file=sys.stderr)
        return None
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in SHAPES]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(SHAPES)}")
    tie_tol = args.tie_tol if args.tie_tol is not None else (1e-3 if args.dtype == "float32" else 0.1)
    return models, Settings(
        device="cuda", dtype=args.dtype, num_prompts=args.num_prompts, input_len=(100, 1024),
        output_len=(100, 1024), oracle_prompts=4, oracle_tokens=32, tie_tol=tie_tol,
        gpu_memory_utilization=args.gpu_memory_utilization, **common,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    started = process_start()
    parsed = parse_settings(args, p)
    if parsed is None:
        return 2
    models, settings = parsed
    budget = Budget(started, settings.budget_s, settings.dtype)
    reports: list[ModelReport] = []
    interrupted = ""
    print_header(settings)

    def status() -> dict[str, Any]:
        return {"total_s": round(time.perf_counter() - started, 1), "interrupted": interrupted}

    with tempfile.TemporaryDirectory(prefix="mooncake-gpu-check-") as tmp:
        try:
            for index, name in enumerate(models):
                print(f"[{name}] starting at {time.perf_counter() - started:.0f}s", flush=True)
                reports.append(ModelReport(name))
                run_model(reports[-1], settings, Path(tmp), budget, models[index + 1 :])
                print_reports(reports[-1:], settings)  # now, in case a later model runs out of time
                if args.json_path:
                    write_json(args.json_path, reports, settings, status())
        except KeyboardInterrupt:  # the wrapper's hard timeout: still print what there is
            interrupted = f"interrupted (SIGINT) at {time.perf_counter() - started:.0f}s"
            print(f"\n{interrupted}", flush=True)
    failed = bool(interrupted) or any(r.failed for r in reports) or len(reports) < len(models)
    print("\n## Summary\n")
    print_reports(reports, settings)
    line = verdict(reports, models, interrupted)
    print(f"total {time.perf_counter() - started:.0f}s of a {settings.budget_s:.0f}s budget; {line}")
    if args.json_path:
        write_json(args.json_path, reports, settings, status())
        print(f"JSON: {args.json_path}")
    sys.stdout.flush()
    code = 1 if failed else 0
    stragglers = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stragglers:  # e.g. an HF generation thread that would not stop: do not hang the machine's run on it
        print(f"exiting past live threads: {', '.join(stragglers)}", flush=True)
        sys.stderr.flush()
        os._exit(code)
    return code
