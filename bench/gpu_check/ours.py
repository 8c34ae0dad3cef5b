"""Our side: LLMEngine on the saved directory, its greedy tokens, and its throughput run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from bench.gpu_check.budget import run_deadline
from bench.gpu_check.floor import StepLog, bandwidth, floor_report
from bench.gpu_check.memory import peak_mib, reset_peak
from bench.gpu_check.report import Settings, Throughput
from inference import EngineConfig, LLMEngine, SamplingParams
from inference.metrics import STEP_PHASES


def our_engine(model_dir: Path, settings: Settings, max_model_len: int, max_num_seqs: int) -> LLMEngine:
    config = EngineConfig(
        model=str(model_dir),
        dtype=settings.dtype,
        device=settings.device,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(4096, settings.input_len[1]),
        gpu_memory_utilization=settings.gpu_memory_utilization,
        enforce_eager=settings.eager,
        # Per-phase step times. A synchronous step then awaits its forward (one device sync per step); a
        # pipelined one (async scheduling) is not slowed, its device time shows as `wait`.
        record_step_timings=True,
        async_scheduling=settings.async_scheduling,
    )
    return LLMEngine(config)


def our_greedy(engine: LLMEngine, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
    return [list(out.outputs[0].token_ids) for out in engine.generate(prompts, params)]


def _runner_note(engine: LLMEngine, settings: Settings, result: Throughput) -> None:
    runner: Any = engine.runner  # the ModelRunner (the engine's Runner protocol leaves these out)
    backend = str(runner.attention_backend_name)
    result.add_note(f"kv={engine.stats().kv_capacity_tokens} tokens, attn={backend}")
    result.extra["attention_backend"] = backend
    sizes = sorted(int(s) for s in runner.cuda_graph_sizes)
    result.extra["cuda_graph_sizes"] = sizes
    result.add_note(
        f"cuda_graphs={len(sizes)} sizes {sizes[0]}..{sizes[-1]}" if sizes else "cuda_graphs=none"
    )
    if settings.eager:
        result.add_note("--eager")
    pipelined = getattr(engine, "_pipeline", None) is not None
    result.extra["async_scheduling"] = pipelined
    result.add_note("async scheduling" if pipelined else "synchronous steps")


_PHASES = (*STEP_PHASES, "device_forward")


def _latency_totals(engine: LLMEngine) -> dict[str, tuple[float, int]]:
    """(sum of seconds, count) of the engine's latency histograms and step phases: two readings give
    one run's means."""
    stats = engine.stats()
    totals = {name: (h.sum, h.count) for name, h in stats.histograms.items()}
    timings = stats.step_timings
    if timings is not None:
        for name in _PHASES:
            totals[name] = (getattr(timings, f"{name}_s"), timings.steps)
    return totals


def _phase_line(phases: dict[str, float], steps: int, result: Throughput) -> None:
    """The engine's own per-phase step times over this run: ms per step and share of the step."""
    total = sum(phases[name] for name in STEP_PHASES)
    if not steps or total <= 0:
        return
    per_step = {name: phases[name] / steps * 1e3 for name in _PHASES}
    result.extra["phases_ms"] = {name: round(ms, 3) for name, ms in per_step.items()}
    parts = [f"{name} {per_step[name]:.2f} ({phases[name] / total:.0%})" for name in STEP_PHASES]
    line = "ms per step: " + ", ".join(parts)
    if phases["device_forward"] > 0:
        line += f"; forward on the device {per_step['device_forward']:.2f}"
    result.extra["phases"] = line


def _step_note(
    engine: LLMEngine, steps: int, before: dict[str, tuple[float, int]], result: Throughput
) -> None:
    """Steps and their mean wall time, and the engine's own latencies over this run.

    The engine times inter-token latency (a decode step as a request sees it), time to first token
    (prefill, with its queueing) and, recorded per step, the forward pass against the host's work.
    """
    if not steps:
        return
    step_ms = result.seconds / steps * 1e3
    result.extra.update(steps=steps, step_ms=round(step_ms, 2))
    note = f"{steps} steps, {step_ms:.1f} ms each"
    after = _latency_totals(engine)
    phases = {name: after[name][0] - before.get(name, (0.0, 0))[0] for name in _PHASES if name in after}
    if phases and sum(phases[name] for name in STEP_PHASES) > 0:
        share = phases["forward"] / sum(phases[name] for name in STEP_PHASES)
        result.extra["forward_share"] = round(share, 3)
        note += f", forward {share:.0%} of step time"
        _phase_line(phases, after["forward"][1] - before.get("forward", (0.0, 0))[1], result)
    for name, label, scale, unit in (("itl", "ITL", 1e3, "ms"), ("ttft", "TTFT", 1.0, "s")):
        seconds = after[name][0] - before[name][0]
        count = after[name][1] - before[name][1]
        if count:
            mean = seconds / count * scale
            result.extra[f"{name}_mean_{unit}"] = round(mean, 3)
            note += f", {label} mean {mean:.{1 if unit == 'ms' else 2}f} {unit}"
    result.add_note(note)


def our_throughput(
    engine: LLMEngine,
    model_name: str,
    prompts: list[list[int]],
    outputs: list[int],
    settings: Settings,
    slice_s: float,
    hard_end: float,
) -> Throughput:
    result = Throughput("ours LLMEngine", requests=len(prompts))
    warm = time.perf_counter()
    engine.generate([prompts[0][:16]], SamplingParams(temperature=0.0, max_tokens=4))
    result.extra["warmup_s"] = round(time.perf_counter() - warm, 1)
    reset_peak(settings.device)
    generated: dict[str, int] = {}
    steps = 0
    log = StepLog()
    scheduler = engine.scheduler
    latencies = _latency_totals(engine)
    started = time.perf_counter()
    deadline = run_deadline(result, started, slice_s, hard_end)
    try:
        for i, (prompt, n) in enumerate(zip(prompts, outputs, strict=True)):
            params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
            engine.add_request(f"r{i}", prompt, params)
        while engine.has_unfinished_requests():
            if time.perf_counter() > deadline:
                result.cut = True
                break
            steps += 1
            running = scheduler.running
            decode_only = not scheduler.waiting and all(seq.is_decoding for seq in running)
            rows, kv_tokens = len(running), sum(len(seq) for seq in running)
            step_started = time.perf_counter()
            step_outputs = engine.step()
            log.add(time.perf_counter() - step_started, rows, kv_tokens, decode_only)
            for out in step_outputs:
                generated[out.request_id] = len(out.outputs[0].token_ids)
                if out.finished:
                    result.requests_done += 1
                    result.prompt_tokens += len(out.prompt_token_ids)
        if settings.device.startswith("cuda"):
            torch.cuda.synchronize()
        result.seconds = time.perf_counter() - started
        result.output_tokens = sum(generated.values())
        result.peak_mem_mib = peak_mib(settings.device)
    finally:
        for i in range(len(prompts)):  # anything cut short at the deadline (or by a crash)
            engine.abort_request(f"r{i}")
        while engine.has_unfinished_requests():
            engine.step()
    _step_note(engine, steps, latencies, result)
    bytes_per_s, source = bandwidth(settings.device, settings.bandwidth_gbs)
    result.extra.update(floor_report(log, model_name, settings.dtype, bytes_per_s, source))
    if result.cut:
        result.add_note(f"cut at {result.seconds:.0f}s: tokens of unfinished requests counted")
    elif result.requests_done < result.requests:
        result.error = f"only {result.requests_done} of {result.requests} requests finished"
    _runner_note(engine, settings, result)
    return result
