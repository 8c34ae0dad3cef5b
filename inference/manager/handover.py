"""A graceful restart's hand-over (ModelManager.reconfigure): drain the old engine, then swap.

Requests that never started leave the old engine with the streams their callers iterate and run on the
new one, so their generate() iterators keep streaming; running requests drain on the old engine for up to
drain_timeout and are then aborted. The engines only offer the primitives: stop_accepting,
take_unstarted, shutdown and adopt.
"""

from __future__ import annotations

import logging
from typing import Protocol

from inference.api import ManagedEngine
from inference.errors import EngineError, RequestFailedError

logger = logging.getLogger(__name__)


class Submission(Protocol):
    """A request taken from an engine before it started (the local front-end's engine_thread.Submission)."""

    @property
    def request_id(self) -> str: ...

    def fail(self, error: BaseException) -> None: ...


def hand_over(engine: ManagedEngine, *, drain_timeout: float = 0.0) -> list[Submission]:
    """Stop engine, keeping its never-started requests (oldest first) for a successor's adopt_all."""
    engine.stop_accepting()  # before taking: nothing may slip in behind the take and be aborted
    moving = engine.take_unstarted()
    engine.shutdown(drain_timeout=drain_timeout)
    return moving


def adopt_all(engine: ManagedEngine, moving: list[Submission]) -> None:
    """Run handed-over requests on engine; one that cannot run there ends its stream with the reason."""
    for submission in moving:
        try:
            engine.adopt(submission)  # PromptTooLongError when the new context is smaller
        except (ValueError, EngineError) as exc:
            submission.fail(exc)
        except Exception:  # e.g. the new tokenizer choked on the prompt: this request alone fails
            logger.exception("Moving request %s to the restarted engine failed", submission.request_id)
            submission.fail(
                RequestFailedError(f"The engine could not start request {submission.request_id}.")
            )
