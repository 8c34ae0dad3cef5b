"""A fake engine (an `inference.api.EngineClient`) and ModelManager, for web-layer tests.

    engine = FakeEngine(script="Hello there, friend.")
    manager = FakeModelManager.with_engine(engine)      # or the `fake_manager` fixture in tests/conftest.py
    get_runtime().install_manager(manager)  # or the runtime fixture

Tokens are whitespace-delimited pieces of text ("Hello ", "there, ", "friend."), so token counts are easy
to reason about. `generate` streams the script one token per RequestOutput, honours max_tokens, stop
strings, stop_token_ids and n, raises the engine's own exceptions, and records calls and aborts.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import re
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any, Literal

from inference.api import (
    CompletionOutput,
    EngineDeadError,
    EngineHealth,
    EngineStats,
    Histogram,
    ModelInfo,
    ModelState,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    RequestOutput,
    SamplingParams,
    UnknownModelError,
)

_PIECE = re.compile(r"\s*\S+\s*|\s+")
EOS_TOKEN_ID = 0
HISTOGRAM_BUCKETS = (0.01, 0.1, 1.0, 10.0, float("inf"))
HISTOGRAM_NAMES = ("ttft", "itl", "e2e_latency", "queue_time")


class FakeTokenizer:
    """Whitespace-piece tokenizer with a vocabulary that grows as it meets new pieces (id 0 is EOS)."""

    eos_token = "</s>"
    eos_token_id = EOS_TOKEN_ID

    def __init__(self) -> None:
        self._ids: dict[str, int] = {self.eos_token: EOS_TOKEN_ID}
        self._pieces: list[str] = [self.eos_token]

    def _id(self, piece: str) -> int:
        if piece not in self._ids:
            self._ids[piece] = len(self._pieces)
            self._pieces.append(piece)
        return self._ids[piece]

    def pieces(self, text: str) -> list[str]:
        return _PIECE.findall(text)

    def encode(self, text: str, add_special_tokens: bool = False, **kwargs: Any) -> list[int]:
        return [self._id(p) for p in self.pieces(text)]

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True, **kwargs: Any) -> str:
        pieces = [self._pieces[i] for i in token_ids if not (skip_special_tokens and i == EOS_TOKEN_ID)]
        return "".join(pieces)

    def convert_ids_to_tokens(self, token_ids: list[int]) -> list[str]:
        return [self._pieces[i] for i in token_ids]

    def __call__(self, text: str, **kwargs: Any) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def __len__(self) -> int:
        return len(self._pieces)


class FakeEngine:
    """Streams `script` for every request; set `state`, `queue_full` or `token_delay` to shape behaviour."""

    def __init__(
        self,
        *,
        model_name: str = "fake-model",
        script: str = "Hello! I am a fake model used in tests.",
        max_model_len: int = 2048,
        max_queue_len: int = 256,
        state: Literal["loading", "ready", "dead"] = "ready",
        error: str | None = None,
        token_delay: float = 0.0,
    ) -> None:
        self.model_name = model_name
        self.script = script
        self.max_model_len = max_model_len
        self.max_queue_len = max_queue_len
        self.state: Literal["loading", "ready", "dead"] = state
        self.error = error
        self.token_delay = token_delay
        self.queue_full = False
        self.tokenizer = FakeTokenizer()
        self.eos_token_ids = {EOS_TOKEN_ID}
        self.memory_bytes = 0
        self.kv_capacity_tokens = max_model_len * 4
        self.model_details: dict[str, Any] = {
            "architecture": "FakeForCausalLM",
            "num_params": 1_000,
            "dtype": "float32",
            "size_on_disk": 4_000,
        }
        self.calls: list[tuple[str | list[int], SamplingParams, str]] = []
        self.aborted: list[str] = []
        self.finished: list[str] = []
        self.running: set[str] = set()
        self.shutdown_calls: list[float] = []
        self._stats = EngineStats(
            kv_capacity_tokens=self.kv_capacity_tokens,
            histograms={k: Histogram(HISTOGRAM_BUCKETS) for k in HISTOGRAM_NAMES},
        )

    # ---- contract surface -------------------------------------------------------------------------
    def expect(self) -> contextlib.nullcontext[None]:
        """No burst gathering to announce requests to: a no-op notice."""
        return contextlib.nullcontext()

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        text = "".join(f"<|{m['role']}|> {m.get('content') or ''}\n" for m in messages)
        if tools:
            text += f"<|tools|> {len(tools)}\n"
        if add_generation_prompt:
            text += "<|assistant|> "
        return self.tokenizer.encode(text)

    async def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        request_id: str | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[RequestOutput, None]:
        # An async generator, as AsyncEngine's: the checks below run at the first anext().
        request_id = request_id or uuid.uuid4().hex
        if self.state == "dead":
            raise EngineDeadError(self.error or "the fake engine is dead")
        if self.queue_full:
            raise QueueFullError("the fake engine's queue is full")
        prompt_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        budget = self.max_model_len - len(prompt_ids)
        if budget <= 0 or (params.max_tokens is not None and params.max_tokens > budget):
            raise PromptTooLongError(
                f"{len(prompt_ids)} prompt tokens + max_tokens={params.max_tokens} > {self.max_model_len}"
            )
        self.calls.append((prompt, params, request_id))
        stream = self._stream(request_id, prompt, prompt_ids, params)
        try:
            async for out in stream:
                yield out
        finally:
            await stream.aclose()  # closing this generator (an abort) reaches the stream's cleanup now

    async def abort(self, request_id: str) -> None:
        if request_id in self.running:
            self.aborted.append(request_id)
            self.running.discard(request_id)

    def health(self) -> EngineHealth:
        return EngineHealth(self.state, self.error)

    def set_on_death(self, callback: Any) -> None:
        """The manager supervises engines; this scripted one never dies by itself."""
        self.on_death = callback

    def stats(self) -> EngineStats:
        self._stats.num_running = len(self.running)
        return self._stats

    def shutdown(self, *, drain_timeout: float = 0.0) -> None:
        self.shutdown_calls.append(drain_timeout)
        self.state = "dead"
        self.error = "shut down"

    # ---- helpers ----------------------------------------------------------------------------------
    def _completion(self, index: int, ids: list[int], new: list[int], finish: str | None, stop: Any) -> Any:
        return CompletionOutput(
            index=index,
            text=self.tokenizer.decode(ids),
            token_ids=list(ids),
            delta_text=self.tokenizer.decode(new),
            delta_token_ids=list(new),
            logprobs=None,
            finish_reason=finish,  # type: ignore[arg-type]
            stop_reason=stop,
        )

    async def _stream(
        self, request_id: str, prompt: str | list[int], prompt_ids: list[int], params: SamplingParams
    ) -> AsyncGenerator[RequestOutput, None]:
        script_ids = [*self.tokenizer.encode(self.script), EOS_TOKEN_ID]
        limit = params.max_tokens if params.max_tokens is not None else self.max_model_len - len(prompt_ids)
        generated: list[list[int]] = [[] for _ in range(params.n)]
        self.running.add(request_id)
        self._stats.prompt_tokens_total += len(prompt_ids)
        started = time.monotonic()
        first_token_at: float | None = None
        finished_cleanly = False
        try:
            for step, token in enumerate(script_ids):
                if request_id not in self.running:  # aborted from outside
                    return
                if self.token_delay:
                    await asyncio.sleep(self.token_delay)
                outputs, done = [], True
                for index, ids in enumerate(generated):
                    finish, stop, new = self._next(ids, token, params, step, limit)
                    outputs.append(self._completion(index, ids, new, finish, stop))
                    done = done and finish is not None
                self._stats.generation_tokens_total += params.n
                if first_token_at is None:
                    first_token_at = time.monotonic()
                    self._observe("queue_time", 0.0)
                    self._observe("ttft", first_token_at - started)
                yield RequestOutput(
                    request_id=request_id,
                    prompt=prompt if isinstance(prompt, str) else None,
                    prompt_token_ids=prompt_ids,
                    prompt_logprobs=None,
                    outputs=outputs,
                    finished=done,
                )
                if done:
                    finished_cleanly = True
                    reason = outputs[0].finish_reason or "stop"
                    self._stats.finished_by_reason[reason] = self._stats.finished_by_reason.get(reason, 0) + 1
                    self._observe("e2e_latency", time.monotonic() - started)
                    self.finished.append(request_id)
                    return
        finally:
            if not finished_cleanly and request_id in self.running:
                self.aborted.append(request_id)
            self.running.discard(request_id)

    def _observe(self, name: str, seconds: float) -> None:
        self._stats.histograms[name].observe(seconds)
        samples = {"ttft": self._stats.ttft_samples, "e2e_latency": self._stats.e2e_latency_samples}
        if name in samples:
            samples[name].append(seconds)

    def _next(
        self, ids: list[int], token: int, params: SamplingParams, step: int, limit: int
    ) -> tuple[str | None, str | int | None, list[int]]:
        """Append `token` unless it ends the sequence; returns (finish_reason, stop_reason, new ids)."""
        if token == EOS_TOKEN_ID and not params.ignore_eos:
            return "stop", None, []
        if token in params.stop_token_ids:
            return "stop", token, []
        ids.append(token)
        text = self.tokenizer.decode(ids)
        for stop in params.stop:
            cut = text.find(stop)
            if cut != -1:
                # Like the real detokenizer: the stop string itself is never emitted.
                kept = self.tokenizer.encode(text[:cut])
                del ids[:]
                ids.extend(kept)
                return "stop", stop, []
        if len(ids) >= limit:
            return "length", None, [token]
        return None, None, [token]


def fake_info(name: str, aliases: list[str], source: str) -> ModelInfo:
    """A registry entry with the fake model's figures."""
    return ModelInfo(
        name=name,
        aliases=aliases,
        source=source,
        architecture="FakeForCausalLM",
        num_params=1_000,
        dtype="float32",
        size_on_disk=4_000,
        memory_bytes=0,
        kv_capacity_tokens=0,
    )


class FakeModelManager:
    """ModelManager's surface over FakeEngines; `load` builds one from `engine_factory`."""

    def __init__(self, *, engine_factory: Any = None) -> None:
        self._engine_factory = engine_factory or (lambda name, config: FakeEngine(model_name=name))
        self._infos: dict[str, ModelInfo] = {}
        self._configs: dict[str, Any] = {}
        self._engines: dict[str, FakeEngine] = {}
        self.default_name: str | None = None
        self.memory_budget_bytes: int | None = None
        self.evict_lru = True
        self.loads: list[str] = []
        self.unloads: list[tuple[str, float]] = []

    @classmethod
    def with_engine(cls, engine: FakeEngine, *, aliases: list[str] | None = None) -> FakeModelManager:
        """A manager whose default model is `engine`, already loaded."""
        manager = cls()
        manager.register(engine.model_name, None, aliases=aliases or [])
        manager.attach(engine.model_name, engine)
        return manager

    def attach(self, name: str, engine: FakeEngine) -> None:
        self._engines[name] = engine
        self._infos[name].state = "loaded"
        self._infos[name].kv_capacity_tokens = engine.max_model_len * 4

    def register(
        self,
        name: str,
        config: Any,
        *,
        aliases: list[str] | None = None,
        keep_alive_seconds: float | None = None,
    ) -> ModelInfo:
        if name in self._infos:
            raise ValueError(f"a model named {name!r} is already registered")
        source = str(getattr(config, "model", "fake"))
        info = fake_info(name, list(aliases or []), source)
        info.keep_alive_seconds = keep_alive_seconds
        self._infos[name] = info
        self._configs[name] = config
        if self.default_name is None:
            self.default_name = name
        return info

    def unregister(self, name: str) -> None:
        name = self._resolve(name)
        self.unload(name)
        del self._infos[name]
        if self.default_name == name:
            self.default_name = next(iter(self._infos), None)

    def load(self, name: str) -> FakeEngine:
        name = self._resolve(name)
        self.loads.append(name)
        if name not in self._engines:
            self.attach(name, self._engine_factory(name, self._configs.get(name)))
        return self._engines[name]

    def unload(self, name: str, *, drain_timeout: float = 0.0) -> None:
        name = self._resolve(name)
        engine = self._engines.pop(name, None)
        if engine is not None:
            engine.shutdown(drain_timeout=drain_timeout)
            self.unloads.append((name, drain_timeout))
        self._infos[name].state = "available"

    def get(self, name: str | None = None) -> FakeEngine:
        engine = self.peek(name)
        self._infos[self._resolve(name or str(self.default_name))].last_used = time.time()
        return engine

    def peek(self, name: str | None = None) -> FakeEngine:
        if name is None:
            if self.default_name is None:
                raise NoModelLoadedError("no default model")
            name = self.default_name
        name = self._resolve(name)
        engine = self._engines.get(name)
        if engine is None:
            raise NoModelLoadedError(f"model {name} is not loaded")
        return engine

    def set_default(self, name: str) -> None:
        self.default_name = self._resolve(name)

    def list(self) -> list[ModelInfo]:
        return list(self._infos.values())

    def reconfigure(
        self,
        name: str,
        config: Any,
        *,
        aliases: builtins.list[str] | None = None,
        keep_alive_seconds: float | None = None,
        drain_timeout: float = 0.0,
    ) -> None:
        name = self._resolve(name)
        self._configs[name] = config
        if aliases is not None:
            self._infos[name].aliases = list(aliases)
        self._infos[name].keep_alive_seconds = keep_alive_seconds
        if name in self._engines:  # a restart, as the real manager does
            self.unload(name, drain_timeout=drain_timeout)
            self.load(name)

    def reap_idle(self, now: float | None = None) -> builtins.list[str]:
        return []

    def set_state(self, name: str, state: ModelState, error: str | None = None) -> None:
        """Force a model's listed state (e.g. "loading" or "failed") for health and console tests."""
        self._infos[self._resolve(name)].state = state
        self._infos[self._resolve(name)].error = error

    def _resolve(self, name: str) -> str:
        if name in self._infos:
            return name
        for info in self._infos.values():
            if name in info.aliases:
                return info.name
        raise UnknownModelError(name)
