"""Engine statistics as plain data; the web layer maps them to Prometheus `mooncake:*` metrics."""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field

RECENT_SAMPLES = 512
# Seconds; close to vLLM's buckets so existing dashboards read the same.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, float("inf"))
ITL_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, float("inf"))


@dataclass(slots=True)
class Histogram:
    """Cumulative histogram: counts[i] observations were <= buckets[i] (Prometheus `le` semantics)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1

    def copy(self) -> Histogram:
        return Histogram(self.buckets, list(self.counts), self.sum, self.count)


STEP_PHASES = ("schedule", "inputs", "forward", "sample", "outputs", "wait")


@dataclass(slots=True)
class StepTimings:
    """Seconds spent in each phase of every step so far (opt-in: EngineConfig.record_step_timings).

    schedule: the scheduler. inputs: the host batch, its copies to the device and the attention metadata.
    forward: the model and its head; a synchronous step awaits it on CUDA (one device sync per step), a
    pipelined one (async_scheduling) only launches it. sample: choosing the tokens. outputs: appending
    them, detokenizing, stop checks, building RequestOutputs. wait: a pipelined step's host time blocked
    on the previous step's sampled ids (the device work the host could not hide); 0 when synchronous.
    device_forward_s: a pipelined CUDA step's forward as the device timed it (CUDA events), else 0.
    """

    steps: int = 0
    schedule_s: float = 0.0
    inputs_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0
    outputs_s: float = 0.0
    wait_s: float = 0.0
    device_forward_s: float = 0.0

    def add(self, phases: dict[str, float]) -> None:
        self.steps += 1
        for name, seconds in phases.items():
            setattr(self, f"{name}_s", getattr(self, f"{name}_s") + seconds)

    @property
    def total_s(self) -> float:
        return sum(getattr(self, f"{name}_s") for name in STEP_PHASES)

    def copy(self) -> StepTimings:
        return dataclasses.replace(self)


class StepClock:
    """Splits one step's wall time into STEP_PHASES: each lap charges the time since the previous one to
    a phase. A no-op when timings are off, so the step loop can call it unconditionally."""

    __slots__ = ("_last", "phases", "timings")

    def __init__(self, timings: StepTimings | None) -> None:
        self.timings = timings
        self.phases: dict[str, float] = dict.fromkeys(STEP_PHASES, 0.0)
        self._last = time.perf_counter() if timings is not None else 0.0

    def lap(self, phase: str, until: float | None = None) -> None:
        """Charge the time since the last lap (up to `until`, a perf_counter reading, else now) to phase."""
        if self.timings is None:
            return
        now = time.perf_counter() if until is None else until
        self.phases[phase] += max(now - self._last, 0.0)
        self._last = now

    def add_device_forward(self, seconds: float) -> None:
        if self.timings is not None:
            self.timings.device_forward_s += seconds

    def done(self) -> None:
        if self.timings is not None:
            self.timings.add(self.phases)


@dataclass(slots=True)
class EngineStats:
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0  # 0..1 of the KV blocks in use
    kv_capacity_tokens: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up
    prefix_cache_hits: int = 0  # prompt tokens found in the cache
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    requests_total: int = 0
    # n-gram speculation (vLLM's spec_decode counters): verified drafts, their tokens, the accepted ones.
    spec_decode_num_drafts: int = 0
    spec_decode_num_draft_tokens: int = 0
    spec_decode_num_accepted_tokens: int = 0
    finished_by_reason: dict[str, int] = field(default_factory=dict)
    ttft_samples: list[float] = field(default_factory=list)  # recent, seconds
    itl_samples: list[float] = field(default_factory=list)
    e2e_latency_samples: list[float] = field(default_factory=list)
    queue_time_samples: list[float] = field(default_factory=list)
    histograms: dict[str, Histogram] = field(default_factory=dict)  # ttft|itl|e2e_latency|queue_time
    step_timings: StepTimings | None = None  # only when the engine records them

    @property
    def spec_decode_acceptance_rate(self) -> float | None:
        """Accepted draft tokens over drafted ones; None before any draft."""
        if not self.spec_decode_num_draft_tokens:
            return None
        return self.spec_decode_num_accepted_tokens / self.spec_decode_num_draft_tokens


class MetricsCollector:
    """Counters owned by the engine thread; `snapshot` copies them for other threads."""

    def __init__(self, *, record_step_timings: bool = False) -> None:
        self.step_timings = StepTimings() if record_step_timings else None
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.spec_decode_num_drafts = 0
        self.spec_decode_num_draft_tokens = 0
        self.spec_decode_num_accepted_tokens = 0
        self.finished_by_reason: dict[str, int] = {}
        self._recent: dict[str, deque[float]] = {
            name: deque(maxlen=RECENT_SAMPLES) for name in ("ttft", "itl", "e2e_latency", "queue_time")
        }
        self._histograms = {
            "ttft": Histogram(LATENCY_BUCKETS),
            "itl": Histogram(ITL_BUCKETS),
            "e2e_latency": Histogram(LATENCY_BUCKETS),
            "queue_time": Histogram(LATENCY_BUCKETS),
        }

    def observe(self, name: str, seconds: float) -> None:
        self._recent[name].append(seconds)
        self._histograms[name].observe(seconds)

    def on_draft_verified(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.spec_decode_num_drafts += 1
        self.spec_decode_num_draft_tokens += num_draft_tokens
        self.spec_decode_num_accepted_tokens += num_accepted

    def on_finished(self, reason: str) -> None:
        self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1

    def record_request(
        self,
        *,
        prompt_tokens: int,
        generated_per_choice: list[int],
        finish_reasons: list[str],
        arrival: float,
        first_token: float | None,
        now: float,
    ) -> None:
        """One finished request of an engine that sees no steps (remote, transformers): its counts, its
        latencies, and its inter-token gap as the mean over the reply."""
        generated, choices = sum(generated_per_choice), len(generated_per_choice)
        self.requests_total += 1
        self.prompt_tokens_total += prompt_tokens
        self.generation_tokens_total += generated
        for reason in finish_reasons:
            self.on_finished(reason)
        self.observe("e2e_latency", now - arrival)
        if first_token is not None:
            self.observe("ttft", first_token - arrival)
            if generated > choices:
                self.observe("itl", (now - first_token) * choices / (generated - choices))

    def snapshot(self, **gauges: int | float) -> EngineStats:
        stats = EngineStats(
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            requests_total=self.requests_total,
            spec_decode_num_drafts=self.spec_decode_num_drafts,
            spec_decode_num_draft_tokens=self.spec_decode_num_draft_tokens,
            spec_decode_num_accepted_tokens=self.spec_decode_num_accepted_tokens,
            finished_by_reason=dict(self.finished_by_reason),
            ttft_samples=list(self._recent["ttft"]),
            itl_samples=list(self._recent["itl"]),
            e2e_latency_samples=list(self._recent["e2e_latency"]),
            queue_time_samples=list(self._recent["queue_time"]),
            histograms={name: h.copy() for name, h in self._histograms.items()},
            step_timings=self.step_timings.copy() if self.step_timings is not None else None,
        )
        for name, value in gauges.items():
            setattr(stats, name, value)
        return stats
