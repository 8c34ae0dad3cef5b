"""TextProcessor: the one owner of a model's tokenizer for requests: prompts, chat templates, decoding.

Calls are serialized by a lock: a Hugging Face fast tokenizer releases the GIL while it encodes, and a
call that changes its truncation or padding settings meanwhile fails ("Already borrowed"). The async
variants run on one worker thread per model, so a long prompt never blocks an event loop and queued
work never ties up the loop's shared executor.

The engine thread's incremental detokenizer (inference.core.detokenizer) decodes through the same tokenizer
without this lock: decoding keeps the GIL and never changes the tokenizer, so it cannot clash with a
call in flight, and the step loop must never wait behind a long prompt's encoding.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class TextProcessor:
    def __init__(self, tokenizer: Any, *, name: str = "model") -> None:
        self.tokenizer = tokenizer
        self.name = name
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    # ---- blocking: from worker threads, or offline ------------------------------------------------
    def encode(self, prompt: str | list[int]) -> list[int]:
        """Token ids of a text prompt (ids pass through as they are)."""
        if isinstance(prompt, list):
            return list(prompt)
        with self._lock:
            return list(self.tokenizer.encode(prompt))

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        with self._lock:
            ids = self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True
            )
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool = False) -> str:
        with self._lock:
            text: str = self.tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
        return text

    # ---- async: off the event loop ------------------------------------------------------------------
    async def encode_async(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, list):
            return list(prompt)
        return await self._off_loop(self.encode, prompt)

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker(), functools.partial(fn, *args, **kwargs))

    def _worker(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"mooncake-text-{self.name}")
            return self._executor

    def close(self) -> None:
        """Stop the worker thread once its queued work is done (a later async call starts a new one)."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
