"""What every front-end does alike: the chat template and tokenizing through one TextProcessor, the start
of a request (its id, the accepting check, the prompt's ids), its choices as one RequestOutput, draining
on shutdown, and the restart primitives of an engine that keeps no queue of its own.

The local front-end (our engine) keeps its own queue, so it overrides expect, the restart primitives and
the request start; the others take these as they are.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from inference.core.tokenization import TextProcessor
from inference.errors import EngineDeadError
from inference.outputs import CompletionOutput, RequestMetrics, RequestOutput


def request_output(
    request_id: str,
    prompt: str | None,
    prompt_ids: list[int],
    outputs: list[CompletionOutput],
    metrics: RequestMetrics,
) -> RequestOutput:
    """A request's choices so far as one RequestOutput; finished once every choice is."""
    return RequestOutput(
        request_id=request_id,
        prompt=prompt,
        prompt_token_ids=prompt_ids,
        prompt_logprobs=None,  # only our engine computes them
        outputs=outputs,
        finished=all(o.finish_reason is not None for o in outputs),
        metrics=metrics,
    )


class FrontEnd:
    text: TextProcessor
    # Said to a request a restart moved here from another engine type: "the model restarted {restarted_as}".
    restarted_as = "on another engine"

    def __init__(self) -> None:
        self._accepting = True

    # ---- requests ---------------------------------------------------------------------------------
    def expect(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()  # requests go straight on: no batch to gather here

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Token ids of messages under the model's chat template. Blocking: call it off the event loop."""
        return self.text.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt
        )

    async def _begin(self, prompt: str | list[int], request_id: str | None) -> tuple[str, list[int]]:
        """A request's id and prompt ids; EngineDeadError once the engine stopped accepting."""
        self._check_open()
        ids = await self.text.encode_async(prompt)  # text on the tokenizer's thread; ids as they are
        return request_id or uuid.uuid4().hex, ids

    def _check_open(self) -> None:
        if not self._accepting:
            raise EngineDeadError("the engine is shut down")

    def _drain(self, busy: Callable[[], bool], timeout: float) -> None:
        """Stop accepting, then wait up to `timeout` seconds for `busy()` to turn false."""
        self._accepting = False
        deadline = time.monotonic() + timeout
        while busy() and time.monotonic() < deadline:
            time.sleep(0.05)

    # ---- restart primitives (ModelManager.reconfigure) --------------------------------------------
    def stop_accepting(self) -> None:
        self._accepting = False

    def take_unstarted(self) -> list[Any]:
        return []  # every request goes on at once: none ever waits here

    def adopt(self, submission: Any) -> None:
        """Another engine's queued request cannot move here (its stream is that engine's kind)."""
        raise EngineDeadError(f"the model restarted {self.restarted_as}; send the request again")
