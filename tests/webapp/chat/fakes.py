"""A scripted engine and manager with the AsyncEngine / ModelManager surface the chat uses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

TITLE_MARKER = "Write a short title"


@dataclass
class FakeEngine:
    reply: str = "Hello there! Here is **bold** and <script>alert(1)</script> text."
    title: str = '"Fake Chat Title"'
    delay: float = 0.0
    title_delay: float = 0.0  # a title's pause per piece (a reply's is `delay`)
    # Set: replies (not titles) stop before their last piece until the test sets the event.
    hold: asyncio.Event | None = None
    model_name: str = "fake-model"
    max_model_len: int = 4096
    fail_with: BaseException | None = None
    fail_after: int | None = None  # raise fail_with after this many tokens instead of before the first
    aborted: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)
    template_calls: int = 0
    # Prompts are code points: every one of them is in the vocabulary.
    tokenizer: range = range(0x110000)

    def apply_chat_template(self, messages: list[dict[str, Any]], **_: Any) -> list[int]:
        self.template_calls += 1
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"
        return [ord(c) for c in text]

    async def generate(self, prompt: list[int], params: Any, **kwargs: Any) -> AsyncIterator[Any]:
        text = "".join(chr(i) for i in prompt)
        is_title = TITLE_MARKER in text
        if not is_title:
            self.prompts.append(text)
            self.params.append(params)
            if self.fail_with is not None and self.fail_after is None:
                raise self.fail_with
        script = self.title if is_title else self.reply
        pieces = [w + " " for w in script.split(" ")]
        pieces[-1] = pieces[-1].rstrip()
        limit = params.max_tokens or len(pieces)
        out, ids, done = "", [], False
        try:
            for i, piece in enumerate(pieces[:limit]):
                if self.fail_after is not None and i == self.fail_after and not is_title:
                    raise self.fail_with or RuntimeError("boom")
                await asyncio.sleep(self.title_delay if is_title else self.delay)
                if self.hold is not None and not is_title and i == min(limit, len(pieces)) - 1:
                    await self.hold.wait()
                out += piece
                ids.append(i)
                last = done = i == min(limit, len(pieces)) - 1
                reason = ("stop" if len(pieces) <= limit else "length") if last else None
                completion = SimpleNamespace(
                    text=out, token_ids=list(ids), delta_text=piece, finish_reason=reason
                )
                yield SimpleNamespace(prompt_token_ids=list(prompt), outputs=[completion], finished=last)
        except (GeneratorExit, asyncio.CancelledError):
            # The engine's contract: closing (or cancelling) an unfinished request's iterator aborts it.
            if not done:
                self.aborted.append(str(kwargs.get("request_id", "")))
            raise

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


@dataclass
class FakeManager:
    engine: FakeEngine
    loaded: bool = True
    loading: bool = False
    downloading: bool = False  # a hub model's files being fetched before it loads
    failed: str | None = None  # the error of a load that failed
    default_name: str = "fake-model"

    def get(self, name: str | None = None) -> FakeEngine:
        from inference import NoModelLoadedError, UnknownModelError

        if name not in (None, "", "default", self.engine.model_name):
            raise UnknownModelError(name)
        if not self.loaded:
            raise NoModelLoadedError("no model is loaded")
        return self.engine

    peek = get  # the chat fake keeps no last-used time, so reading without use is the same

    def list(self) -> list[Any]:
        state = (
            "loaded" if self.loaded
            else "downloading" if self.downloading
            else "loading" if self.loading
            else "failed" if self.failed
            else "available"
        )  # fmt: skip
        info = SimpleNamespace(name=self.engine.model_name, state=state, aliases=[], task="generate")
        info.error, info.memory_bytes = self.failed, None
        return [info]
