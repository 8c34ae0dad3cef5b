"""Hugging Face's throughput run: the prompts through its ContinuousBatchingManager, within a deadline."""

from __future__ import annotations

import time
from typing import Any

from bench.gpu_check import hf_compat
from bench.gpu_check.budget import run_deadline
from bench.gpu_check.memory import peak_mib, reset_peak
from bench.gpu_check.report import Settings, Throughput


def _count_cut(manager: Any, result: Throughput) -> None:
    """After a hard stop: requests that finished just before it count whole, failed ones their tokens."""
    partial = 0
    while (out := manager.get_result(timeout=0.1)) is not None:
        if not out.is_finished():
            continue
        if getattr(out, "error", None):
            partial += len(out.generated_tokens)
        else:
            result.requests_done += 1
            result.output_tokens += len(out.generated_tokens)
        result.prompt_tokens += len(out.prompt_ids)
    result.output_tokens += partial
    result.add_note(f"cut at {result.seconds:.0f}s: {partial} tokens of unfinished requests counted")


def _collect(manager: Any, result: Throughput, pending: int, deadline: float, failed: list[str]) -> bool:
    """Take results until none are pending or the deadline passes; True when the manager must stop hard."""
    while pending:
        if time.perf_counter() > deadline:
            result.cut = True
            return True
        out = manager.get_result(timeout=1)
        if out is None:
            if not manager.is_running():
                result.error = "the manager's generation thread died"
                result.add_note("the manager stopped early")
                return True
            continue
        if not out.is_finished():
            continue
        pending -= 1
        result.prompt_tokens += len(out.prompt_ids)
        if getattr(out, "error", None):  # is_finished() is true for failed requests too
            failed.append(str(out.error))
            continue
        result.requests_done += 1
        result.output_tokens += len(out.generated_tokens)
    return False


def hf_throughput(
    model: Any,
    prompts: list[list[int]],
    outputs: list[int],
    settings: Settings,
    slice_s: float,
    hard_end: float,
) -> Throughput:
    result = Throughput("HF ContinuousBatchingManager", requests=len(prompts))
    reset_peak(settings.device)
    manager = hf_compat.init_manager(model, prompts, outputs, settings)
    # The manager switches the model to its paged attention (5.17: paged|sdpa; 5.24: sdpa) until stop().
    attn = str(getattr(model.config, "_attn_implementation", "?"))
    hard = True  # until the run ends normally: a crash must not leave requests generating
    failed: list[str] = []
    try:
        warmup_s = hf_compat.warm_up(manager)
        if warmup_s is not None:
            result.extra["warmup_s"] = warmup_s
        manager.start()
        started = time.perf_counter()
        deadline = run_deadline(result, started, slice_s, hard_end)
        extra = hf_compat.request_kwargs(manager)
        for i, (prompt, n) in enumerate(zip(prompts, outputs, strict=True)):
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=n, **extra)
        hard = _collect(manager, result, len(prompts), deadline, failed)
        result.seconds = time.perf_counter() - started
    finally:
        note = hf_compat.cache_note(manager)
        hf_compat.stop(model, manager, hard=hard)
        if manager.is_running():
            result.add_note("its generation thread did not stop")
    if result.cut:
        _count_cut(manager, result)
    if failed:
        result.error = f"{len(failed)} requests failed, e.g. {failed[0][:200]}"
        result.add_note(f"{len(failed)} requests FAILED")
    result.peak_mem_mib = peak_mib(settings.device)
    result.add_note(f"attn={attn}")
    if note:
        result.add_note(note)
    result.extra.update(attn=attn, failed=len(failed))
    return result
