"""TransformersEngine: an EngineClient on transformers' own continuous batching and paged cache, in this
process, for architectures our engine does not implement (Gemma, Phi, Mistral, ...).

transformers' ContinuousBatchingManager steps the model in its own thread;
inference.frontends.transformers.router keeps it running and brings its results to each request's asyncio
queue. Text, stop strings and finish reasons are ours (inference.frontends.transformers.choices); sampling is
theirs (inference.frontends.transformers.batching says what it takes)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from inference.config import EngineConfig
from inference.core.prompt_check import check_prompt
from inference.core.tokenization import TextProcessor
from inference.errors import EngineDeadError, QueueFullError, RequestFailedError
from inference.frontends.base import FrontEnd, request_output
from inference.frontends.transformers.batching import (
    batching_config,
    check_sampling,
    generation_config,
    kv_bytes_per_token,
    request_kwargs,
)
from inference.frontends.transformers.choices import TransformersChoice
from inference.frontends.transformers.loader import load_transformers_model
from inference.frontends.transformers.router import BatchingRunner, Route, deliver
from inference.metrics import EngineStats, MetricsCollector
from inference.models.loader.load import LoadedWeights
from inference.outputs import RequestMetrics, RequestOutput
from inference.sampling_params import SamplingParams
from inference.status import EngineHealth

logger = logging.getLogger(__name__)

_ABORTED = object()  # abort() was called: the request ends with finish reason "abort"


class TransformersEngine(FrontEnd):
    restarted_as = "on the transformers engine"

    def __init__(self, config: EngineConfig, loaded: LoadedWeights) -> None:
        super().__init__()
        self.config = config
        self.model_name = config.model
        self.max_queue_len = config.max_queue_len
        self.tokenizer: Any = loaded.tokenizer
        self.eos_token_ids = set(loaded.eos_token_ids)
        self.text = TextProcessor(loaded.tokenizer, name=loaded.architecture)
        self.max_model_len = min(config.max_model_len or loaded.context_length, loaded.context_length)
        self._vocab_size = int(loaded.model.config.get_text_config().vocab_size)
        per_token = kv_bytes_per_token(loaded.model.config, loaded.dtype)
        cb_config, kv_bytes = batching_config(
            config, device=loaded.device, bytes_per_token=per_token, max_model_len=self.max_model_len
        )
        weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
        self.memory_bytes = weights + (kv_bytes or 0)
        self.kv_capacity_tokens = (kv_bytes or 0) // per_token
        self.model_details: dict[str, Any] = {
            "architecture": f"{loaded.architecture} (transformers)",
            "num_params": loaded.num_params,
            "dtype": str(loaded.dtype).removeprefix("torch."),
            "size_on_disk": loaded.size_on_disk,
        }
        gen_config = generation_config(self.eos_token_ids, self.max_model_len)
        model = loaded.model
        self._runner = BatchingRunner(
            lambda: model.init_continuous_batching(
                generation_config=gen_config, continuous_batching_config=cb_config
            ),
            on_dead=self._died,
            name=f"transformers-router-{config.model}",
        )
        self._metrics = MetricsCollector()
        self._lock = threading.Lock()  # requests and metrics: stats() reads them from other threads
        self._requests: dict[str, list[str]] = {}  # our request id -> its choices' ids there
        self._health = EngineHealth("ready")
        self._on_death: Callable[[], None] | None = None

    @classmethod
    def start(cls, config: EngineConfig) -> TransformersEngine:
        """Load the model, then start transformers' batching thread and our router."""
        engine = cls(config, load_transformers_model(config))
        engine._runner.start()
        return engine

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[RequestOutput, None]:
        """Stream outputs; closing the iterator early cancels the request there and frees its pages."""
        request_id, ids = await self._begin(prompt, request_id)
        check_sampling(params)
        max_tokens = check_prompt(ids, params, max_model_len=self.max_model_len, vocab_size=self._vocab_size)
        metrics = RequestMetrics(arrival_time=time.time())
        queue: asyncio.Queue[Any] = asyncio.Queue()
        choices = [TransformersChoice.start(i, self.tokenizer, ids, params) for i in range(params.n)]
        sub_ids = self._submit(request_id, ids, params, max_tokens, queue)
        prompt_text = prompt if isinstance(prompt, str) else None
        try:
            while any(c.finish_reason is None for c in choices):
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item is _ABORTED:
                    for choice in choices:
                        choice.finish_reason = choice.finish_reason or "abort"
                else:
                    index, generated, finished, error = item
                    if error is not None:
                        logger.error("transformers failed request %s: %s", request_id, error)
                        raise RequestFailedError("the engine failed while running this request")
                    choice = choices[index]
                    if choice.finish_reason is not None:
                        continue
                    if choice.fold(
                        generated,
                        finished=finished,
                        params=params,
                        eos_token_ids=self.eos_token_ids,
                        max_tokens=max_tokens,
                    ):
                        self._cancel([sub_ids[index]])  # a stop string: no need to sample on
                if metrics.first_token_time is None and any(c.token_ids for c in choices):
                    metrics.first_token_time = time.time()
                yield request_output(request_id, prompt_text, ids, [c.output() for c in choices], metrics)
        finally:
            self._cancel(sub_ids)
            with self._lock:
                self._requests.pop(request_id, None)
            self._record(ids, choices, metrics)

    def _submit(
        self,
        request_id: str,
        ids: list[int],
        params: SamplingParams,
        max_tokens: int,
        queue: asyncio.Queue[Any],
    ) -> list[str]:
        loop = asyncio.get_running_loop()
        sub_ids = [f"{request_id}/{i}" for i in range(params.n)]
        with self._lock:
            if len(self._requests) >= self.config.max_num_seqs + self.max_queue_len:
                raise QueueFullError(f"{self.max_queue_len} requests are already waiting for this model")
            self._requests[request_id] = sub_ids
        stops = set(params.stop_token_ids) | (set() if params.ignore_eos else self.eos_token_ids)
        request = {
            "max_new_tokens": max_tokens,
            "eos_token_id": sorted(stops) or -1,
            **request_kwargs(params, self._vocab_size),
        }
        for index, sub_id in enumerate(sub_ids):
            if not self._runner.submit(sub_id, ids, Route(loop, queue, index), **request):
                self._cancel(sub_ids)  # it stopped taking requests: shutting down, or restarting its loop
                with self._lock:
                    self._requests.pop(request_id, None)
                raise EngineDeadError("the transformers engine is not taking requests; retry shortly")
        return sub_ids

    def _cancel(self, sub_ids: list[str]) -> None:
        self._runner.cancel(sub_ids)

    async def abort(self, request_id: str) -> None:
        with self._lock:
            sub_ids = self._requests.get(request_id, [])
        route = self._runner.first_route(sub_ids)
        if route is not None:
            self._cancel(sub_ids)
            deliver(route, _ABORTED)

    def _died(self, error: str) -> None:
        """transformers' loop keeps dying: fail what runs, and say so once."""
        logger.error("Engine for %s died: %s", self.model_name, error)
        self._accepting = False
        self._health = EngineHealth("dead", error)
        self._runner.fail_all(EngineDeadError(error))
        if self._on_death is not None:
            self._on_death()

    def _record(self, ids: list[int], choices: list[TransformersChoice], metrics: RequestMetrics) -> None:
        with self._lock:
            self._metrics.record_request(
                prompt_tokens=len(ids),
                generated_per_choice=[len(c.token_ids) for c in choices],
                finish_reasons=[c.finish_reason or "abort" for c in choices],
                arrival=metrics.arrival_time,
                first_token=metrics.first_token_time,
                now=time.time(),
            )

    # ---- state ------------------------------------------------------------------------------------
    def health(self) -> EngineHealth:
        return self._health

    def stats(self) -> EngineStats:
        with self._lock:
            return self._metrics.snapshot(
                num_running=len(self._requests),
                num_waiting=0,
                kv_cache_usage=self._runner.kv_usage(),
                kv_capacity_tokens=self.kv_capacity_tokens,
            )

    def set_on_death(self, callback: Callable[[TransformersEngine], None]) -> None:
        """Call `callback(self)` once if transformers' batching thread dies (at once if it has)."""
        self._on_death = lambda: callback(self)
        if self._health.state == "dead":
            self._on_death()

    def shutdown(self, *, drain_timeout: float = 0.0) -> None:
        """Stop accepting, let running requests finish for up to drain_timeout seconds, then stop."""
        self._drain(lambda: bool(self._requests), drain_timeout)
        self._runner.fail_all(EngineDeadError("the model was unloaded"))
        self._runner.close()
        self.text.close()
