"""Async scheduling: the host schedules and launches step N while step P, the one before, may still run on
the device, so the host's work (scheduling, inputs, detokenizing, outputs) hides behind the device's.

One step() with P in flight (EngineConfig.async_scheduling):
  1. Schedule N. Each row that samples in P already ends in a placeholder token (PLACEHOLDER) and P's
     progress is booked, so the scheduler plans one more token for every running decode as if P's tokens
     were known. A sequence whose in-flight token ends it whatever it is (max_tokens, max_model_len) gets
     no row (Scheduler.finishing).
  2. Launch N: inputs are built on the host and the placeholders overwritten on the device from P's
     sampled ids (model_io.InFlightIds); N's tokens are sampled on the device and copied, non-blocking,
     into pinned host memory.
  3. Process P while N runs: wait for P's ids, put each in place of its placeholder, detokenize, check
     stops, build outputs. A sequence that stopped at P (EOS, stop token or string) or was aborted has a
     wasted row in N, dropped in step 4: its blocks went back when it finished, and N's write into them
     precedes, in stream order, any later step that reuses them. No token past a stop is ever emitted.
  4. Book N's progress for the rows still running and append their placeholders: N stays in flight and
     P's outputs are returned. Outputs therefore come one step() later than without async scheduling.

Which steps are processed at once instead (synchronously, right after the in-flight step, so every token
is real by then), because a row that samples in them needs host state of a token still in flight, or the
host must see the step's results before the next is planned:
  - every step, while speculative decoding is configured (drafting reads the last token): the engine
    then runs its plain loop (make_pipeline returns None);
  - a step in which the scheduler preempted a sequence;
  - a step with a chunk that returns all its logits (prompt logprobs);
  - a step with a sampling row whose request has n > 1 (the fork follows the first token), asks for
    logprobs, has logits processors (grammars, forced tool calls), repetition/presence/frequency
    penalties, or is below its min_tokens (judged on the host's count, which may lag by the in-flight
    token, so the floor's last step is processed at once too);
  - a step whose device-side sampling raised (the synchronous path isolates the failing rows).
A forward that raises with ids in flight processes the in-flight step first, then runs as a plain step
(isolating the failing requests). An abort strips its sequence's placeholder at once.

Greedy rows, temperature with top-k/top-p/min-p, logit_bias and seeds are exact in flight: none of them
reads the tokens of the sequence. Detokenizing and building outputs stay on the engine thread, in step 3:
stop strings need the text before a finished sequence's KV is freed, and on CUDA that work already
overlaps the device's step N (its cost shows as `outputs` in the step timings). On CPU the device work is
synchronous: the same order runs there (tests cover it), without any speed-up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from inference.core.model_io import InFlightIds, StepLogits, small_tensor
from inference.core.scheduler import SchedulerOutput
from inference.core.sequence import Sequence
from inference.core.step_host import StepHost
from inference.outputs import RequestOutput

# Stands for a token sampled on the device and not yet seen by the host; never a real id.
PLACEHOLDER = -1


def can_pipeline(seq: Sequence) -> bool:
    """Whether seq's next token can be sampled while its previous one is still in flight."""
    params = seq.params
    return (
        params.n == 1
        and params.logprobs is None
        and params.prompt_logprobs is None
        and not params.logits_processors
        and not params.has_penalties
        and seq.num_output_tokens >= params.min_tokens
    )


def strip_placeholder(seq: Sequence) -> None:
    """Drop seq's in-flight token, if it has one (an abort: its client never sees that token)."""
    if len(seq.token_ids) > seq.num_prompt_tokens and seq.token_ids[-1] == PLACEHOLDER:
        seq.token_ids.pop()


def make_pipeline(engine: StepHost) -> StepPipeline | None:
    """The engine's pipeline, or None for the plain synchronous loop."""
    wanted = engine.config.async_scheduling
    device = getattr(engine.runner, "device", None)
    if wanted is None:
        wanted = isinstance(device, torch.device) and device.type == "cuda"
    if not wanted or engine.scheduler.drafter is not None:
        return None
    if not getattr(engine.runner, "supports_in_flight_ids", False):
        raise ValueError("async_scheduling needs a model runner that takes in-flight input ids")
    return StepPipeline(engine)


@dataclass(slots=True)
class _Flight:
    """A launched step whose sampled ids the host has not processed yet."""

    scheduled: SchedulerOutput
    seqs: list[Sequence | None]  # per row of `sampled`; None: dropped (its sequence ended meanwhile)
    rows: dict[int, int]  # seq_id -> its row of `sampled`, for the sequences still waiting for it
    sampled: torch.Tensor  # on the device
    host: torch.Tensor  # its copy on the host (pinned on CUDA), valid once `copied` has completed
    copied: torch.cuda.Event | None
    forward: tuple[torch.cuda.Event, torch.cuda.Event] | None  # to time the forward on the device

    def feed(self, scheduled: SchedulerOutput) -> InFlightIds | None:
        """Where scheduled's flat input ids take this step's sampled ids."""
        src: list[int] = []
        dst: list[int] = []
        offset = 0
        for seq, chunk in zip(scheduled.seqs, scheduled.chunks, strict=True):
            if chunk.token_ids[chunk.start + chunk.num_tokens - 1] == PLACEHOLDER:
                row = self.rows.get(seq.seq_id)
                if row is None or chunk.num_tokens != 1:
                    raise RuntimeError(f"{seq!r} has a placeholder that no step in flight fills")
                src.append(row)
                dst.append(offset)
            offset += chunk.num_tokens
        return InFlightIds(self.sampled, src, dst) if src else None

    def wait(self) -> list[int]:
        if self.copied is not None:
            self.copied.synchronize()
        return [int(t) for t in self.host.tolist()]


class StepPipeline:
    def __init__(self, engine: StepHost) -> None:
        self.engine = engine
        self.in_flight: _Flight | None = None
        self._processed_at = 0.0  # perf_counter when the latest step's results were processed
        self._on_cuda = getattr(getattr(engine.runner, "device", None), "type", None) == "cuda"

    def step(self) -> list[RequestOutput]:
        e = self.engine
        clock = e.new_clock()
        flight, self.in_flight = self.in_flight, None
        scheduled = e.scheduler.schedule()
        clock.lap("schedule")
        outputs: list[RequestOutput] = []
        logits: StepLogits | None = None
        events = None
        if not scheduled.is_empty:
            feed = flight.feed(scheduled) if flight is not None else None
            events = self._record_start()
            started = time.perf_counter()
            if feed is None:
                logits = e._execute(scheduled)
            else:
                try:
                    logits = e.runner.execute(scheduled.chunks, in_flight=feed)
                    e._failed_steps_in_a_row = 0
                except Exception:
                    # With the in-flight tokens in place the plain step (and its isolation) sees real ids.
                    outputs += self._process(flight) if flight is not None else []
                    flight = None
                    self._drop_ended(scheduled, None)
                    logits = e._execute(scheduled) if not scheduled.is_empty else None
            if events is not None:
                events[1].record()
            e.lap_forward(started, None)  # not awaited: that is the overlap
        sampled = self._sample(scheduled, logits) if logits is not None else None
        # ... and while the device computes, the host processes the step before.
        if flight is not None:
            outputs += self._process(flight)
        if sampled is None:
            if flight is not None:
                logits = self._drop_ended(scheduled, logits)
            outputs += e._postprocess(scheduled, logits)
            self._record_step(scheduled)
        else:
            self._drop_ended(scheduled, None)  # (indexing the logits here would wait for the device)
            outputs += self._book(scheduled, *sampled, events)
        clock.done()
        return outputs

    # ---- launch ----------------------------------------------------------------------------------
    def _record_start(self) -> tuple[torch.cuda.Event, torch.cuda.Event] | None:
        if not self._on_cuda or self.engine.metrics.step_timings is None:
            return None
        events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        events[0].record()
        return events

    def _sample(
        self, scheduled: SchedulerOutput, logits: StepLogits
    ) -> tuple[torch.Tensor, list[Sequence]] | None:
        """This step's ids on the device and the sequences they are for, when the step can stay in flight;
        else None (the step is processed at once)."""
        if scheduled.preempted or scheduled.drafts or any(c.return_all_logits for c in scheduled.chunks):
            return None
        rows = [i for i, seq in enumerate(scheduled.seqs) if _samples(seq, scheduled.num_tokens[i])]
        seqs = [scheduled.seqs[i] for i in rows]
        if not all(can_pipeline(seq) for seq in seqs):
            return None
        if not rows:
            return torch.empty(0, dtype=torch.long, device=logits.last.device), []
        last = logits.last
        if len(rows) < len(scheduled.seqs):
            last = last.index_select(0, small_tensor(rows, last.device))
        try:
            sampled = self.engine.sampler.sample_ids(last, seqs)
        except Exception:
            return None  # the synchronous path samples again, isolating the rows that fail
        self.engine.clock.lap("sample")
        return sampled, seqs

    # ---- after the launch --------------------------------------------------------------------------
    def _book(
        self,
        scheduled: SchedulerOutput,
        sampled: torch.Tensor,
        sampling: list[Sequence],
        events: tuple[torch.cuda.Event, torch.cuda.Event] | None,
    ) -> list[RequestOutput]:
        """Book a launched step's progress (ended rows already dropped) and leave it in flight; `sampling`:
        the sequence of each row of `sampled`. Returns the aborts' outputs."""
        e = self.engine
        e.mark_scheduled(scheduled)
        e.scheduler.update_computed(scheduled)
        rows: dict[int, int] = {}
        alive: list[Sequence | None] = []
        for row, seq in enumerate(sampling):
            if seq.status.is_finished:
                alive.append(None)  # its wasted row
                continue
            alive.append(seq)
            seq.token_ids.append(PLACEHOLDER)
            rows[seq.seq_id] = row
            if seq.num_output_tokens >= seq.max_tokens or len(seq) >= e.max_model_len:
                e.scheduler.finishing.add(seq.seq_id)
        host, copied = sampled, None
        if sampled.is_cuda:
            host = torch.empty(sampled.shape, dtype=sampled.dtype, pin_memory=True)
            host.copy_(sampled, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        if rows:
            self.in_flight = _Flight(scheduled, alive, rows, sampled, host, copied, events)
        else:  # prefill chunks only, or only wasted rows: nothing to wait for
            self._record_step(scheduled)
        e.clock.lap("outputs")
        return e.take_pending()

    def _process(self, flight: _Flight) -> list[RequestOutput]:
        """The in-flight step's tokens into their sequences: stops, detokenizing, outputs."""
        e = self.engine
        ids = flight.wait()
        e.clock.lap("wait")
        if flight.forward is not None:
            e.clock.add_device_forward(flight.forward[0].elapsed_time(flight.forward[1]) / 1e3)
        now = time.time()
        touched = {}
        for seq, token_id in zip(flight.seqs, ids, strict=True):
            if seq is None or seq.status.is_finished:
                continue  # ended meanwhile (an abort or a failure): nothing past it is emitted
            request = e._requests.get(seq.request_id)
            if request is None:
                continue
            try:
                if seq.token_ids[-1] != PLACEHOLDER:
                    raise RuntimeError(f"{seq!r} lost its token in flight")
                seq.token_ids.pop()
                e._append_token(request, seq, token_id, None, now)
            except Exception as exc:  # detokenizing or a stop check: this request alone
                e.fail_request(request.request_id, exc)
                continue
            touched[request.request_id] = request
        outputs = e.emit(touched, now)
        if touched:  # (a step whose rows were all aborted meanwhile may be long stale)
            self._record_step(flight.scheduled)
        e.clock.lap("outputs")
        return outputs

    def _drop_ended(self, scheduled: SchedulerOutput, logits: StepLogits | None) -> StepLogits | None:
        """Drop the rows of sequences that ended after this step was scheduled (their wasted rows)."""
        keep = [i for i, seq in enumerate(scheduled.seqs) if not seq.status.is_finished]
        if len(keep) == len(scheduled.seqs):
            return logits
        # Only a sequence with a token in flight can end before its step runs, and its row decodes.
        scheduled.num_decodes = max(scheduled.num_decodes - (len(scheduled.seqs) - len(keep)), 0)
        scheduled.seqs = [scheduled.seqs[i] for i in keep]
        scheduled.num_tokens = [scheduled.num_tokens[i] for i in keep]
        scheduled.chunks = [scheduled.chunks[i] for i in keep]
        if logits is None:
            return None
        old_to_new = {old: new for new, old in enumerate(keep)}
        return StepLogits(
            last=logits.last[keep],
            all_positions={old_to_new[i]: t for i, t in logits.all_positions.items() if i in old_to_new},
        )

    def _record_step(self, scheduled: SchedulerOutput) -> None:
        """The step's duration for the scheduler's cost model: from its start, or from when the step
        before it was processed if later (overlapped steps would otherwise count twice)."""
        now = time.perf_counter()
        self.engine.scheduler.record_step(scheduled, now - max(scheduled.started_at, self._processed_at))
        self._processed_at = now


def _samples(seq: Sequence, num_new: int) -> bool:
    """Whether seq's row samples a token (its chunk reaches the end of its tokens), before booking."""
    return seq.num_computed_tokens + num_new == len(seq.token_ids)
