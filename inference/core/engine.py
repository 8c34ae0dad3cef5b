"""LLMEngine: the step loop (schedule, execute, postprocess), usable offline. With async scheduling its
steps run pipelined, one launched ahead of the host's processing (inference.core.async_step).

Over 300 lines: admission, the step and the per-request failure path all work on the one request table,
and splitting them would only pass it around.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import torch

from inference.config import EngineConfig
from inference.core.async_step import make_pipeline, strip_placeholder
from inference.core.block_manager import BlockManager
from inference.core.logprobs import LogprobBuilder
from inference.core.model_io import InFlightIds, ScheduledChunk, StepLogits
from inference.core.prompt_check import check_prompt
from inference.core.request import Request
from inference.core.sampler import Sampler
from inference.core.scheduler import Scheduler, SchedulerOutput
from inference.core.sequence import Sequence, SequenceStatus
from inference.core.speculative import Drafter
from inference.core.step_isolation import execute_isolating, sample_isolating
from inference.core.tokenization import TextProcessor
from inference.errors import EngineBrokenError, QueueFullError, RequestFailedError
from inference.metrics import EngineStats, MetricsCollector, StepClock
from inference.outputs import RequestOutput
from inference.progress import ALLOCATING, report
from inference.sampling_params import SamplingParams

if TYPE_CHECKING:
    from inference.models.loader.load import LoadedModel

logger = logging.getLogger(__name__)

# Steps in a row that failed (each ending its culprits) before the engine counts as broken: a healthy
# step in between resets the count, so bad requests alone never get the engine restarted.
MAX_FAILED_STEPS_IN_A_ROW = 8


class Runner(Protocol):
    """What the engine needs from inference.core.model_runner.ModelRunner (tests pass a double)."""

    block_size: int
    num_blocks: int
    max_model_len: int
    kv_capacity_tokens: int
    vocab_size: int
    kv_window: int | None  # every layer's keys older than this many positions are never read again

    @property
    def rows_apart(self) -> bool:
        """Decoding rows round apart from prompt chunks: a recomputed sequence replays its tokens as rows."""
        ...

    # in_flight: only passed when async scheduling is on (a runner then sets supports_in_flight_ids).
    def execute(self, chunks: list[ScheduledChunk], in_flight: InFlightIds | None = None) -> StepLogits: ...


class LLMEngine:
    def __init__(
        self, config: EngineConfig, *, loaded: LoadedModel | None = None, runner: Runner | None = None
    ):
        if loaded is None:
            from inference.models.loader.load import load_from_config  # heavy import, only when we load here

            loaded = load_from_config(config)
        if runner is None:
            from inference.core.model_runner import ModelRunner

            report(ALLOCATING)
            runner = ModelRunner.from_config(loaded, config)
        self.config = config
        self.loaded = loaded
        self.runner = runner
        self.tokenizer: Any = loaded.tokenizer
        self.text = TextProcessor(self.tokenizer, name=config.model)  # prompts and templates go through it
        self.eos_token_ids: set[int] = set(loaded.eos_token_ids)
        # A lone sequence must always fit in the cache, or preemption could never make room for it.
        self.max_model_len = min(runner.max_model_len, runner.num_blocks * runner.block_size)
        block_manager = BlockManager(
            runner.num_blocks,
            runner.block_size,
            enable_prefix_caching=config.enable_prefix_caching,
            kv_window=runner.kv_window,
        )
        drafter = Drafter(config.speculative, self.max_model_len) if config.speculative is not None else None
        scheduling = config.scheduler_config(self.max_model_len, replay_outputs_as_rows=runner.rows_apart)
        self.scheduler = Scheduler(scheduling, block_manager, drafter)
        self.sampler = Sampler(eos_token_ids=self.eos_token_ids, seed=config.seed)
        self.metrics = MetricsCollector(record_step_timings=config.record_step_timings)
        self._logprobs = LogprobBuilder(self.tokenizer)
        self._requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []  # outputs of aborts, returned by the next step()
        self._failures: list[tuple[str, RequestFailedError]] = []  # requests that failed alone
        self._failed_steps_in_a_row = 0
        self._ids = itertools.count()
        self.clock = StepClock(None)  # the current step's phase timer
        self._pipeline = make_pipeline(self)  # async scheduling, or None for the plain loop

    # ---- requests ---------------------------------------------------------------------------------
    def encode(self, prompt: str | list[int]) -> list[int]:
        return self.text.encode(prompt)

    def check_prompt(self, prompt_token_ids: list[int], params: SamplingParams) -> int:
        """Raise if the prompt cannot run; returns the effective max_tokens."""
        return check_prompt(
            prompt_token_ids, params, max_model_len=self.max_model_len, vocab_size=self.runner.vocab_size
        )

    def add_request(
        self,
        request_id: str | None,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        prompt_token_ids: list[int] | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
    ) -> str:
        """Queue a request; prompt_token_ids skips tokenizing when the caller already did it."""
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if len(self.scheduler.waiting) >= self.config.max_queue_len:
            raise QueueFullError(
                f"{len(self.scheduler.waiting)} requests are already waiting; retry shortly (the server's "
                "max_queue_len bounds the queue)"
            )
        token_ids = prompt_token_ids if prompt_token_ids is not None else self.encode(prompt)
        max_tokens = self.check_prompt(token_ids, params)
        request = Request(
            request_id,
            prompt if isinstance(prompt, str) else None,
            token_ids,
            params,
            max_tokens=max_tokens,
            arrival_time=arrival_time if arrival_time is not None else time.time(),
            priority=priority,
            tokenizer=self.tokenizer,
        )
        self._requests[request_id] = request
        self.metrics.requests_total += 1
        self.scheduler.add(request.root)
        return request_id

    def abort_request(self, request_id: str) -> None:
        """Finish the request as aborted now (blocks freed); its final output comes from the next step()."""
        request = self._requests.get(request_id)
        if request is None:
            return
        request.aborted = True
        for seq in request.seqs.values():
            strip_placeholder(seq)  # a token in flight (async scheduling) that its client never saw
        self.scheduler.finish_requests(list(request.seqs.values()), SequenceStatus.FINISHED_ABORTED)
        self._pending.append(self._finalize(request, time.time()))

    def take_unscheduled(self) -> list[Request]:
        """Remove and return requests never scheduled (no tokens computed, no output), for a successor engine.

        They leave through the scheduler's one exit path; nothing is reported for them here, and they do not
        count as served by this engine.
        """
        taken = [r for r in self._requests.values() if r.metrics.first_scheduled_time is None]
        for request in taken:
            self.scheduler.finish_requests(list(request.seqs.values()), SequenceStatus.FINISHED_ABORTED)
            del self._requests[request.request_id]
            self.metrics.requests_total -= 1
        return taken

    def fail_request(self, request_id: str, error: BaseException) -> None:
        """End one request whose processing raised; the others in its batch go on."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return
        logger.error("Request %s failed in the engine and was ended alone", request_id, exc_info=error)
        request.aborted = True
        self.scheduler.finish_requests(list(request.seqs.values()), SequenceStatus.FINISHED_ABORTED)
        self.metrics.on_finished("error")
        # Clients see a generic message; the cause is in the log under the request id.
        error_out = RequestFailedError(f"The engine could not complete request {request_id}.")
        self._failures.append((request_id, error_out))

    def take_failures(self) -> list[tuple[str, RequestFailedError]]:
        """Requests ended by fail_request since the last call, with the error their callers get."""
        failures, self._failures = self._failures, []
        return failures

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests or self._pending)

    @property
    def num_requests(self) -> int:
        return len(self._requests)

    # ---- the loop ---------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        if self._pipeline is not None:
            return self._pipeline.step()
        clock = self.new_clock()
        scheduled = self.scheduler.schedule()
        clock.lap("schedule")
        logits = None
        if not scheduled.is_empty:
            started = time.perf_counter()
            logits = self._execute(scheduled)
            self.lap_forward(
                started, logits.last.device if logits is not None and logits.last.is_cuda else None
            )
        outputs = self._postprocess(scheduled, logits)
        self.scheduler.record_step(scheduled, time.perf_counter() - scheduled.started_at)  # sizes chunks
        clock.done()
        return outputs

    def new_clock(self) -> StepClock:
        self.clock = StepClock(self.metrics.step_timings)
        return self.clock

    def lap_forward(self, started: float, sync: torch.device | None) -> None:
        """Charge the runner's call since `started` to inputs and forward; `sync`: a CUDA device to await
        first, so that the forward's own time counts, not just its launch."""
        if self.clock.timings is None:
            return
        if sync is not None:
            torch.cuda.synchronize(sync)
        ready = getattr(self.runner, "inputs_ready_at", 0.0)
        if ready >= started:
            self.clock.lap("inputs", ready)
        self.clock.lap("forward")

    def _execute(self, scheduled: SchedulerOutput) -> StepLogits | None:
        try:
            logits = self.runner.execute(scheduled.chunks)
        except Exception as exc:
            self._failed_steps_in_a_row += 1
            if self._failed_steps_in_a_row >= MAX_FAILED_STEPS_IN_A_ROW:
                raise EngineBrokenError(f"{self._failed_steps_in_a_row} steps in a row failed") from exc
            return execute_isolating(self.runner, scheduled, exc, self.fail_request)
        self._failed_steps_in_a_row = 0
        return logits

    def generate(
        self, prompts: list[str] | list[list[int]], params: SamplingParams | list[SamplingParams]
    ) -> list[RequestOutput]:
        """Run prompts to completion; outputs in prompt order."""
        all_params = params if isinstance(params, list) else [params] * len(prompts)
        if len(all_params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(all_params)} sampling params")
        prompt_list: list[str | list[int]] = list(prompts)
        ids = [self.add_request(None, prompt, p) for prompt, p in zip(prompt_list, all_params, strict=True)]
        final: dict[str, RequestOutput] = {}
        while self.has_unfinished_requests():
            final.update((out.request_id, out) for out in self.step() if out.finished)
        return [final[i] for i in ids]

    def stats(self) -> EngineStats:
        block_manager = self.scheduler.block_manager
        return self.metrics.snapshot(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_cache_usage=block_manager.usage,
            kv_capacity_tokens=self.runner.kv_capacity_tokens,
            num_preemptions=self.scheduler.num_preemptions,
            prefix_cache_queries=block_manager.prefix_cache_queries,
            prefix_cache_hits=block_manager.prefix_cache_hits,
        )

    # ---- postprocess ------------------------------------------------------------------------------
    def mark_scheduled(self, scheduled: SchedulerOutput) -> None:
        for seq in scheduled.seqs:
            request = self._requests[seq.request_id]  # isolation already dropped failed requests' seqs
            if request.metrics.first_scheduled_time is None:
                request.metrics.first_scheduled_time = scheduled.created_at
                request.metrics.num_cached_tokens = seq.num_cached_tokens
                self.metrics.observe("queue_time", scheduled.created_at - request.metrics.arrival_time)

    def take_pending(self) -> list[RequestOutput]:
        pending, self._pending = self._pending, []
        return pending

    def _postprocess(self, scheduled: SchedulerOutput, logits: StepLogits | None) -> list[RequestOutput]:
        now = time.time()
        self.mark_scheduled(scheduled)
        done = self.scheduler.update_computed(scheduled)
        touched: dict[str, Request] = {}
        if logits is not None:
            self._collect_prompt_logprobs(scheduled, logits)
            drafted = scheduled.drafts
            rows = [i for i, finished_chunk in enumerate(done) if finished_chunk]
            plain = [i for i in rows if scheduled.seqs[i].seq_id not in drafted]
            if plain:
                last = logits.last if len(plain) == len(done) else logits.last[plain]
                touched = self._sample([scheduled.seqs[i] for i in plain], last, now)
            if len(plain) < len(rows):
                touched.update(self._verify([i for i in rows if i not in plain], scheduled, logits, now))
        outputs = self.emit(touched, now)
        self.clock.lap("outputs")
        return outputs

    def emit(self, touched: dict[str, Request], now: float) -> list[RequestOutput]:
        """The pending aborts' outputs, then one for each request that got tokens."""
        outputs = self.take_pending()
        for request in touched.values():
            if request.request_id not in self._requests:
                continue  # failed while its output was being made
            try:
                outputs.append(self._finalize(request, now) if request.finished else request.make_output())
            except Exception as exc:
                self.fail_request(request.request_id, exc)
        return outputs

    def _sample(self, seqs: list[Sequence], logits: torch.Tensor, now: float) -> dict[str, Request]:
        """Sample one token for each of seqs and append it; returns the requests that got tokens."""
        self.clock.lap("outputs")
        try:
            result = self.sampler(logits, seqs)
        except Exception:
            seqs, result = sample_isolating(self.sampler, logits, seqs, self.fail_request)
        self.clock.lap("sample")
        touched: dict[str, Request] = {}
        for seq, token_id, lps in zip(seqs, result.token_ids, result.logprobs, strict=True):
            request = self._requests.get(seq.request_id)
            if request is None:  # failed earlier in this step
                continue
            try:
                self._append_token(request, seq, token_id, lps, now)
            except Exception as exc:  # detokenizing or a stop check: this request alone
                self.fail_request(request.request_id, exc)
                continue
            touched[request.request_id] = request
        return touched

    def _verify(
        self, rows: list[int], scheduled: SchedulerOutput, logits: StepLogits, now: float
    ) -> dict[str, Request]:
        """Verify drafted rows and append what each emits, token by token through the plain path, so stops
        and lengths end it exactly where they would without drafts; the rest is dropped."""
        touched: dict[str, Request] = {}
        for i in rows:
            seq = scheduled.seqs[i]
            request = self._requests.get(seq.request_id)
            if request is None:
                continue
            draft = scheduled.drafts[seq.seq_id]
            try:
                result = self.sampler.verify(logits.all_positions[i], seq, draft)
                self.metrics.on_draft_verified(len(draft), len(result.token_ids) - 1)
                for j, (token_id, lps) in enumerate(zip(result.token_ids, result.logprobs, strict=True)):
                    if j:
                        self.scheduler.accept_draft_token(seq)
                    self._append_token(request, seq, token_id, lps, now)
                    if seq.status.is_finished:
                        break
                self.scheduler.settle_drafts(seq)
            except Exception as exc:
                self.fail_request(request.request_id, exc)
                continue
            touched[request.request_id] = request
        return touched

    def _append_token(
        self,
        request: Request,
        seq: Sequence,
        token_id: int,
        lps: tuple[float, list[tuple[int, float]]] | None,
        now: float,
    ) -> None:
        seq.token_ids.append(token_id)
        if lps is not None:
            seq.logprobs.append(self._logprobs.sampled(token_id, lps[0], lps[1]))
        self.metrics.generation_tokens_total += 1
        if request.metrics.first_token_time is None:
            request.metrics.first_token_time = now
            self.metrics.prompt_tokens_total += len(request.prompt_token_ids)
            self.metrics.observe("ttft", now - request.metrics.arrival_time)
        elif request.last_token_time is not None and seq.index == 0:
            self.metrics.observe("itl", now - request.last_token_time)
        if seq.index == 0:
            request.last_token_time = now
        if seq.index == 0 and seq.num_output_tokens == 1:
            for index in range(len(request.seqs), request.params.n):
                child = seq.fork(index)
                request.track(child)
                self.scheduler.add_running_fork(seq, child)
        status = request.check_stop(
            seq, token_id, eos_token_ids=self.eos_token_ids, max_model_len=self.max_model_len
        )
        if status is not None:
            self.scheduler.finish_requests([seq], status)

    def _collect_prompt_logprobs(self, scheduled: SchedulerOutput, logits: StepLogits) -> None:
        for i, (seq, chunk) in enumerate(zip(scheduled.seqs, scheduled.chunks, strict=True)):
            request = self._requests.get(seq.request_id)
            if request is None or not chunk.return_all_logits or i not in logits.all_positions:
                continue
            if seq.seq_id in scheduled.drafts:
                continue  # a draft's verification logits, not a prompt's
            try:
                self._logprobs.collect_prompt(request, seq, chunk, logits.all_positions[i])
            except Exception as exc:
                self.fail_request(request.request_id, exc)

    def _finalize(self, request: Request, now: float) -> RequestOutput:
        request.metrics.finished_time = now
        self.metrics.observe("e2e_latency", now - request.metrics.arrival_time)
        output = request.make_output()  # first: should it raise, the request is still there to fail
        for seq in request.seqs.values():
            self.metrics.on_finished(seq.status.finish_reason or "abort")
        self._requests.pop(request.request_id, None)
        return output
