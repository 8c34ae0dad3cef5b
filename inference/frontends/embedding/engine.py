"""EmbeddingEngine: the asyncio front of one embedding model (engine task "embed").

It is a ManagedEngine like every front-end, so the model manager loads, evicts, supervises and reports it
as any model; it generates nothing (generate() refuses with UnsupportedTaskError) and adds embed(), the
EmbeddingClient capability. embed() hands the request to the model's EmbeddingBatcher thread and awaits a
future that the thread settles with loop.call_soon_threadsafe; a caller cancelled meanwhile drops it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from inference.config import EngineConfig
from inference.core.tokenization import TextProcessor
from inference.errors import PromptTooLongError, UnsupportedTaskError
from inference.frontends.base import FrontEnd
from inference.frontends.embedding.batcher import EmbeddingBatcher, EmbedRequest, Vectors
from inference.frontends.embedding.model import EmbeddingModel, load_embedding_model
from inference.metrics import EngineStats
from inference.outputs import RequestOutput
from inference.sampling_params import SamplingParams
from inference.status import EngineHealth


class EmbeddingEngine(FrontEnd):
    def __init__(self, model: EmbeddingModel, config: EngineConfig) -> None:
        super().__init__()
        self.model = model
        self.model_name = config.model
        self.max_model_len = model.max_model_len
        self.max_queue_len = config.max_queue_len
        self.tokenizer: Any = model.tokenizer
        self.eos_token_ids: set[int] = set()
        self.text = TextProcessor(model.tokenizer, name=config.model)
        self.memory_bytes = model.memory_bytes
        self.kv_capacity_tokens = 0  # an encoder keeps no cache
        self.dimensions = model.dimensions
        self.truncatable = model.truncatable
        self.model_details: dict[str, Any] = {
            "architecture": model.architecture,
            "num_params": model.num_params,
            "dtype": str(model.dtype).removeprefix("torch."),
            "size_on_disk": model.size_on_disk,
        }
        self._vocab = len(model.tokenizer)
        self._batcher = EmbeddingBatcher(
            model.embed,
            max_batch_tokens=max(config.max_num_batched_tokens, model.max_model_len),
            max_batch_rows=config.max_num_seqs,
            max_queue_len=config.max_queue_len,
            name=config.model,
        )

    @classmethod
    def start(cls, config: EngineConfig) -> EmbeddingEngine:
        """Load the model synchronously, then start its batching thread."""
        return cls(load_embedding_model(config), config)

    # ---- requests ---------------------------------------------------------------------------------
    async def embed(self, inputs: list[list[int]]) -> Vectors:
        """One vector per row of token ids, in order (pooled, normalised where the model says so)."""
        self._check(inputs)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Vectors] = loop.create_future()

        def settle(result: Vectors | BaseException) -> None:
            if future.done():  # the caller was cancelled meanwhile
                return
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

        def deliver(result: Vectors | BaseException) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody is listening
                loop.call_soon_threadsafe(settle, result)

        request = EmbedRequest(inputs, deliver)
        self._batcher.submit(request)
        try:
            return await future
        except asyncio.CancelledError:
            self._batcher.drop(request)
            raise

    def _check(self, inputs: list[list[int]]) -> None:
        self._check_open()
        if not inputs or any(not ids for ids in inputs):
            raise ValueError("every input must have at least one token")
        for ids in inputs:
            if len(ids) > self.max_model_len:
                raise PromptTooLongError(
                    f"an input has {len(ids)} tokens; this model embeds at most {self.max_model_len}"
                )
            if any(not 0 <= t < self._vocab for t in ids):
                raise ValueError(f"token ids must be in [0, {self._vocab})")

    def _check_open(self) -> None:
        self._batcher.check_open()

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[RequestOutput, None]:
        """An embedding model generates nothing."""
        raise UnsupportedTaskError(f"model {self.model_name!r} is an embedding model; it does not generate")
        yield  # pragma: no cover - makes this an async generator, as EngineClient's generate is

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        raise UnsupportedTaskError(f"model {self.model_name!r} is an embedding model; it does not chat")

    async def abort(self, request_id: str) -> None:
        return None  # embed() requests end with their caller (see embed)

    # ---- state ------------------------------------------------------------------------------------
    def health(self) -> EngineHealth:
        health = self._batcher.health
        return EngineHealth(health.state, health.error)

    def stats(self) -> EngineStats:
        return self._batcher.stats()

    def set_on_death(self, callback: Callable[[Any], None]) -> None:
        self._batcher.set_on_death(lambda: callback(self))

    def shutdown(self, *, drain_timeout: float = 0.0) -> None:
        self._batcher.stop(drain_timeout=drain_timeout)
        self.text.close()

    def stop_accepting(self) -> None:
        self._batcher.stop_accepting()
