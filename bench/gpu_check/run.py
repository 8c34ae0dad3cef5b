"""One model's phases, in order, each guarded so that a crash is reported and the check goes on."""

from __future__ import annotations

import shutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench.gpu_check.budget import Budget
from bench.gpu_check.hf_side import hf_throughput
from bench.gpu_check.memory import free_memory
from bench.gpu_check.oracle import HFOracle, compare_tokens, hf_greedy
from bench.gpu_check.ours import our_engine, our_greedy, our_throughput
from bench.gpu_check.report import ModelReport, Settings
from bench.gpu_check.zoo import SHAPES, build_model, eos_id, make_prompts, oracle_prompts

T = TypeVar("T")


def attempt(report: ModelReport, phase: str, device: str, fn: Callable[[], T]) -> T | None:
    """Run one phase; a crash is printed (stdout, in order with the rest) and recorded, and None returned."""
    started = time.perf_counter()
    print(f"[{report.name}] {phase} ...", flush=True)
    try:
        value = fn()
        report.phase_s[phase] = round(time.perf_counter() - started, 1)
        print(f"[{report.name}] {phase} done in {report.phase_s[phase]:.1f}s", flush=True)
        return value
    except Exception as exc:
        print(f"[{report.name}] {phase} CRASHED after {time.perf_counter() - started:.1f}s:", flush=True)
        traceback.print_exc(file=sys.stdout)
        message = (str(exc).strip().splitlines() or [""])[0][:300]
        report.errors.append(f"{phase}: {type(exc).__name__}: {message}")
    finally:
        sys.stdout.flush()
    free_memory(device)  # after the except block, so the traceback's frames (and their tensors) are gone
    return None


def _judge(
    report: ModelReport,
    settings: Settings,
    prompts: list[list[int]],
    ours: list[list[int]] | None,
    theirs: HFOracle | None,
) -> None:
    if theirs is None or ours is None:
        report.oracle.append("not compared: " + ("HF" if theirs is None else "our") + " oracle crashed")
        report.oracle_failed = True
        return
    eos = eos_id(report.name)
    for i, (prompt, a, b, logits) in enumerate(zip(prompts, ours, theirs.tokens, theirs.logits, strict=True)):
        verdict, failed = compare_tokens(a, b, logits, settings, eos)
        report.oracle.append(f"prompt {i} ({len(prompt)} tokens): {verdict}")
        report.oracle_failed |= failed


def run_model(
    report: ModelReport, settings: Settings, work: Path, budget: Budget, later: Sequence[str]
) -> None:
    """Fills `report` as it goes, so an interrupted model still shows what it did."""
    name, device = report.name, settings.device
    vocab = SHAPES[name]["vocab_size"]
    model_dir = work / name
    model_started = time.perf_counter()
    hard_end = budget.hard_end(later)
    try:
        hf_model: Any = attempt(report, "build", device, lambda: build_model(name, model_dir, settings))
        report.build_s = time.perf_counter() - model_started
        if hf_model is None:
            return
        print(f"[{name}] built and saved in {report.build_s:.1f}s -> {model_dir}", flush=True)

        oracle_in = oracle_prompts(settings, vocab)
        hf_oracle = attempt(
            report,
            "HF oracle",
            device,
            lambda: hf_greedy(hf_model, oracle_in, settings.oracle_tokens, eos_id(name)),
        )
        prompts, outputs = make_prompts(settings, vocab)
        slice_s = budget.run_slice(name, later)
        print(
            f"[{name}] each throughput run gets {slice_s:.0f}s ({budget.left():.0f}s of budget left)",
            flush=True,
        )
        if not settings.oracle_only:
            hf_run = attempt(
                report,
                "HF throughput",
                device,
                lambda: hf_throughput(hf_model, prompts, outputs, settings, slice_s, hard_end),
            )
            if hf_run is not None:
                report.runs.append(hf_run)
                if hf_run.error:
                    report.errors.append(f"HF throughput: {hf_run.error}")
                print(f"[{name}] HF: {hf_run.tok_s:.0f} output tok/s ({hf_run.note})", flush=True)
        hf_model = None  # both sides get the device to themselves (the lambdas above share this cell)
        free_memory(device)

        longest_oracle = max(len(x) for x in oracle_in) + settings.oracle_tokens
        max_len = max(settings.input_len[1] + settings.output_len[1], longest_oracle) + 16
        engine: Any = attempt(
            report,
            "our engine load",
            device,
            lambda: our_engine(model_dir, settings, max_len, min(256, settings.num_prompts)),
        )
        if engine is None:
            report.oracle.append("not compared: our engine did not load")
            return
        ours_out = attempt(
            report, "our oracle", device, lambda: our_greedy(engine, oracle_in, settings.oracle_tokens)
        )
        _judge(report, settings, oracle_in, ours_out, hf_oracle)
        if not settings.oracle_only:
            ours_run = attempt(
                report,
                "our throughput",
                device,
                lambda: our_throughput(engine, name, prompts, outputs, settings, slice_s, hard_end),
            )
            if ours_run is not None:
                report.runs.insert(0, ours_run)
                if ours_run.error:
                    report.errors.append(f"our throughput: {ours_run.error}")
                print(f"[{name}] ours: {ours_run.tok_s:.0f} output tok/s ({ours_run.note})", flush=True)
        engine = None
    finally:
        free_memory(device)
        shutil.rmtree(model_dir, ignore_errors=True)
        report.model_s = time.perf_counter() - model_started
