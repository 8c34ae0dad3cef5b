"""AsyncEngine: the asyncio front of one loaded model; an EngineThread runs its LLMEngine.

generate() tokenizes a text prompt off the event loop (inference.core.tokenization), submits the request to
the engine thread and streams its outputs from a per-request asyncio.Queue that the thread fills with
loop.call_soon_threadsafe. An idle engine lets a burst of requests gather before its first step
(inference.frontends.local.admission); callers may announce requests they are preparing with expect().

For a graceful restart (ModelManager.reconfigure: drain, then swap) it offers primitives: stop_accepting,
take_unstarted (the requests that never started, with the streams their callers iterate) and adopt.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from inference.config import EngineConfig
from inference.core.engine import LLMEngine
from inference.frontends.base import FrontEnd
from inference.frontends.local.admission import AdmissionGate
from inference.frontends.local.engine_thread import EngineThread, RequestStream, Submission
from inference.frontends.local.model_facts import memory_bytes, model_details
from inference.metrics import EngineStats
from inference.outputs import RequestOutput
from inference.sampling_params import SamplingParams
from inference.status import EngineHealth

__all__ = ["AsyncEngine", "EngineHealth", "Submission"]  # EngineHealth: re-exported from its old home


class AsyncEngine(FrontEnd):
    def __init__(self, engine: LLMEngine, *, admission: AdmissionGate | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.model_name = engine.config.model
        self.max_model_len = engine.max_model_len
        self.max_queue_len = engine.config.max_queue_len
        self.tokenizer: Any = engine.tokenizer
        self.eos_token_ids = engine.eos_token_ids
        self.text = engine.text  # the tokenizer's one owner for prompts and templates
        self.admission = admission or AdmissionGate()
        # What the model manager and the console show; fixed once the engine is built.
        self.memory_bytes = memory_bytes(engine)
        self.kv_capacity_tokens: int = engine.runner.kv_capacity_tokens
        self.model_details = model_details(engine)
        self._worker = EngineThread(engine, self.admission)

    @classmethod
    def start(cls, config: EngineConfig) -> AsyncEngine:
        """Load the model synchronously, then start the step thread."""
        return cls(LLMEngine(config))

    # ---- requests ---------------------------------------------------------------------------------
    def expect(self) -> contextlib.AbstractContextManager[object]:
        """Held while a caller prepares a request, so an idle engine waits for it (see AdmissionGate)."""
        return self.admission.expect()

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[RequestOutput, None]:
        """Stream outputs; closing the iterator early aborts the request and frees its blocks."""
        request_id, token_ids = await self._begin(prompt, request_id)
        self.engine.check_prompt(token_ids, params)
        stream = RequestStream(asyncio.get_running_loop(), asyncio.Queue(), self._worker)
        prompt_text = prompt if isinstance(prompt, str) else None
        self._worker.submit(
            Submission(request_id, prompt_text, token_ids, params, priority, time.time(), stream)
        )
        finished = False
        try:
            while True:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            if not finished:
                stream.closed = True  # set before reading the owner: submit() sets the owner, then checks
                stream.owner.abort(request_id)

    def _check_open(self) -> None:
        self._worker.check_open()  # the engine thread's state: stopping, dead or restarting

    async def abort(self, request_id: str) -> None:
        self._worker.abort(request_id)

    # ---- state ------------------------------------------------------------------------------------
    def health(self) -> EngineHealth:
        health = self._worker.health
        return EngineHealth(health.state, health.error)

    def set_on_death(self, callback: Callable[[AsyncEngine], None]) -> None:
        """Call `callback(self)` once if the engine thread dies (at once if it already has)."""
        self._worker.set_on_death(lambda: callback(self))

    def stats(self) -> EngineStats:
        return self._worker.stats

    def shutdown(self, *, drain_timeout: float = 0.0) -> None:
        """Stop accepting, let running requests finish for up to drain_timeout seconds, then stop."""
        self._worker.stop(drain_timeout=drain_timeout)
        self.text.close()

    # ---- restart primitives (ModelManager.reconfigure) --------------------------------------------
    def stop_accepting(self) -> None:
        """New requests get EngineDeadError from now on; the ones already here carry on."""
        self._worker.stop_accepting()

    def take_unstarted(self) -> list[Submission]:
        """Remove the requests that never started, oldest first, streams intact: for adopt(), or fail()."""
        return self._worker.take_unstarted()

    def adopt(self, submission: Submission) -> None:
        """Run a request another engine gave up; its caller's generate() iterator gets the outputs here.

        Raises what generate() would (EngineDeadError, PromptTooLongError, ValueError) if it cannot run here.
        """
        if submission.prompt is not None:  # this model's tokenizer decides, should the source have changed
            submission.prompt_token_ids = self.text.encode(submission.prompt)
        self.engine.check_prompt(submission.prompt_token_ids, submission.params)
        self._worker.submit(submission, limit_queue=False)
