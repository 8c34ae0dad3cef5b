"""RemoteEngine: an EngineClient whose model runs on another server that speaks the OpenAI API.

Prompts are templated and tokenized here, with the model source's own tokenizer, and sent upstream as
token ids (POST /completions accepts them), so a prompt reaches the model exactly as the native engine
would run it; the reply streams back as text. A request with n > 1 runs as n upstream requests of one
choice each (not every server supports n). Closing a request's iterator closes its upstream streams.
The replies become RequestOutputs in inference.frontends.remote.outputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from inference.config import EngineConfig
from inference.core.prompt_check import check_prompt
from inference.core.tokenization import TextProcessor
from inference.errors import UpstreamUnavailableError
from inference.frontends.base import FrontEnd, request_output
from inference.frontends.remote.health import UpstreamHealth
from inference.frontends.remote.outputs import ChoiceState
from inference.frontends.remote.upstream import Upstream, completion_body
from inference.metrics import EngineStats, MetricsCollector
from inference.models.loader.tokenizer import TokenizerSource, load_tokenizer_source
from inference.outputs import RequestMetrics, RequestOutput
from inference.sampling_params import SamplingParams
from inference.status import EngineHealth

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT = 4096  # when neither the config, the upstream nor the model's config says


class RemoteEngine(FrontEnd):
    restarted_as = "with a remote engine"

    def __init__(self, config: EngineConfig, source: TokenizerSource, upstream: Upstream) -> None:
        super().__init__()
        self.config = config
        self.model_name = config.model
        self.max_queue_len = config.max_queue_len
        self.tokenizer: Any = source.tokenizer
        self.eos_token_ids = source.eos_token_ids
        self.text = TextProcessor(source.tokenizer, name=Path(config.model).name or "remote")
        self.upstream = upstream
        self.memory_bytes = 0  # the weights live upstream: nothing here counts against the memory budget
        self.kv_capacity_tokens = 0
        self.model_details: dict[str, Any] = {"architecture": f"openai API at {upstream.host}"}
        self._context = source.context_length
        self.health_monitor = UpstreamHealth(upstream, wanted=config.remote().upstream_model)
        self._metrics = MetricsCollector()
        self._lock = threading.Lock()  # the metrics and the running set: stats() reads from other threads
        self._running: dict[str, tuple[asyncio.AbstractEventLoop, list[asyncio.Task[None]]]] = {}

    @classmethod
    def start(cls, config: EngineConfig) -> RemoteEngine:
        """Load the tokenizer, then look at the upstream once; a server still starting is no failure:
        health says so and the health monitor keeps looking."""
        source = load_tokenizer_source(
            config.model,
            model_roots=config.model_roots,
            cache_dir=Path(config.cache_dir) if config.cache_dir else None,
        )
        remote = config.remote()
        assert remote.base_url is not None  # EngineConfig requires it for this engine type
        upstream = Upstream(remote.base_url, api_key=remote.api_key, timeout=remote.request_timeout)
        engine = cls(config, source, upstream)
        engine.health_monitor.start()
        return engine

    @property
    def max_model_len(self) -> int:
        """The config's, else what the upstream's model card says (vLLM, Mooncake), else the model's."""
        return (
            self.config.max_model_len or self.health_monitor.max_model_len or self._context or DEFAULT_CONTEXT
        )

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[RequestOutput, None]:
        """Stream outputs; closing the iterator early closes the upstream streams (the upstream aborts)."""
        request_id, ids = await self._begin(prompt, request_id)
        self._check(ids, params)
        model = self.health_monitor.known_name
        if model is None:  # the upstream was down so far: ask it now (blocking, so off the loop)
            model = await asyncio.to_thread(self.health_monitor.model_name)
        arrival = time.time()
        queue: asyncio.Queue[tuple[int, dict[str, Any] | BaseException | None]] = asyncio.Queue()
        tasks = [
            asyncio.create_task(self._pump(i, completion_body(model, ids, params, index=i), queue))
            for i in range(params.n)
        ]
        with self._lock:
            self._running[request_id] = (asyncio.get_running_loop(), tasks)
        choices = [ChoiceState(i) for i in range(params.n)]
        first_token: float | None = None
        try:
            while any(c.finish_reason is None for c in choices):
                index, item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                choice = choices[index]
                if item is None:  # aborted (abort() cancelled its stream)
                    choice.finish_reason = "abort"
                elif not choice.apply(item, self.tokenizer, self.eos_token_ids, logprobs=params.logprobs):
                    continue
                if first_token is None and choice.token_ids:
                    first_token = time.time()
                self.health_monitor.mark_up()
                outputs = [c.output(logprobs=params.logprobs is not None) for c in choices]
                yield request_output(request_id, None, ids, outputs, RequestMetrics(arrival_time=arrival))
        except UpstreamUnavailableError as exc:
            self.health_monitor.mark_down(exc)
            raise
        finally:
            with self._lock:
                self._running.pop(request_id, None)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._record(ids, choices, arrival, first_token)

    def _check(self, ids: list[int], params: SamplingParams) -> None:
        # A grammar mask (response_format, forced tool calls) runs on logits, which stay upstream.
        if params.logits_processors:
            raise ValueError(
                "response_format (json_object, json_schema) and forced tool calls are not available for "
                "this model: its engine is a remote server (engine type 'openai'), where grammar masks "
                "cannot run"
            )
        if params.prompt_logprobs is not None:
            raise ValueError(
                "prompt logprobs (echo with logprobs) are not available with engine type 'openai'"
            )
        check_prompt(ids, params, max_model_len=self.max_model_len, vocab_size=None)

    async def _pump(
        self,
        index: int,
        body: dict[str, Any],
        queue: asyncio.Queue[tuple[int, dict[str, Any] | BaseException | None]],
    ) -> None:
        events = self.upstream.completion_events(body)
        try:
            async for event in events:
                queue.put_nowait((index, event))
            queue.put_nowait((index, {"done": True}))
        except asyncio.CancelledError:
            queue.put_nowait((index, None))
            raise
        except Exception as exc:
            queue.put_nowait((index, exc))
        finally:
            await events.aclose()  # at once: the upstream sees the connection close and aborts

    def _record(
        self, ids: list[int], choices: list[ChoiceState], arrival: float, first_token: float | None
    ) -> None:
        with self._lock:
            self._metrics.record_request(
                prompt_tokens=len(ids),
                generated_per_choice=[len(c.token_ids) for c in choices],
                finish_reasons=[c.finish_reason or "abort" for c in choices],
                arrival=arrival,
                first_token=first_token,
                now=time.time(),
            )

    async def abort(self, request_id: str) -> None:
        with self._lock:
            running = self._running.get(request_id)
        if running is not None:
            _cancel(*running)

    # ---- state ------------------------------------------------------------------------------------
    def health(self) -> EngineHealth:
        return self.health_monitor.health()

    def stats(self) -> EngineStats:
        with self._lock:
            return self._metrics.snapshot(num_running=len(self._running), num_waiting=0)

    def set_on_death(self, callback: Callable[[RemoteEngine], None]) -> None:
        """Never called: an upstream that fails is no death here. Health says so, requests get a 503, and
        nothing in this process needs restarting; the upstream's own supervisor restarts it."""

    def shutdown(self, *, drain_timeout: float = 0.0) -> None:
        """Stop accepting, let running requests finish for up to drain_timeout seconds, then close them."""
        self._drain(lambda: bool(self._running), drain_timeout)
        with self._lock:
            running = list(self._running.values())
        for loop, tasks in running:
            _cancel(loop, tasks)
        self.health_monitor.stop()
        self.text.close()


def _cancel(loop: asyncio.AbstractEventLoop, tasks: list[asyncio.Task[None]]) -> None:
    """Cancel a request's upstream streams from any thread."""
    for task in tasks:
        with contextlib.suppress(RuntimeError):  # the loop has closed: its tasks are gone already
            loop.call_soon_threadsafe(task.cancel)
