"""User-facing chat errors: one place that turns engine exceptions into a code and a sentence."""

from __future__ import annotations

import logging

from inference.api import (
    EngineDeadError,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    RequestFailedError,
    UnknownModelError,
)
from webapp.core.request_id import error_reference

logger = logging.getLogger(__name__)


class ChatError(Exception):
    """An error shown inline in the chat; the typed message stays in the composer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def too_long(num_tokens: int, limit: int) -> ChatError:
    return ChatError(
        "context_too_long",
        f"This conversation is too long for the model ({num_tokens} tokens, the limit is {limit}). "
        "Start a new chat or edit an earlier message.",
    )


def from_engine(exc: BaseException, *, model: str, loading: bool = False) -> ChatError:
    """Map an engine exception to the sentence the user sees."""
    if isinstance(exc, PromptTooLongError):
        return ChatError("context_too_long", f"This conversation is too long for the model: {exc}")
    if isinstance(exc, NoModelLoadedError) and loading:
        return ChatError("model_loading", "The model is still loading. Try again in a moment.")
    if isinstance(exc, NoModelLoadedError):
        return ChatError("no_model", "No model is loaded. An administrator can load one in the console.")
    if isinstance(exc, UnknownModelError):
        return ChatError("unknown_model", f"The model “{model}” is not available. Pick another in Settings.")
    if isinstance(exc, QueueFullError):
        return ChatError("busy", "The server is busy. Try again in a moment.")
    if isinstance(exc, EngineDeadError):
        return ChatError(
            "engine_dead", "The model stopped unexpectedly and is restarting. Try again shortly."
        )
    # Anything else can carry crash details (CUDA errors, paths): the user gets a reference to quote,
    # the log gets the details under it.
    reference = error_reference()
    logger.error("chat reply failed (reference %s): %s: %s", reference, type(exc).__name__, exc)
    if isinstance(exc, RequestFailedError):
        return ChatError("engine_error", f"The model could not finish this reply (reference {reference}).")
    return ChatError("engine_error", f"The model failed (reference {reference}).")


RATE_LIMITED = ChatError("rate_limited", "You are sending messages too quickly. Wait a moment and try again.")
BUSY_HERE = ChatError("busy", "A reply is still being written. Stop it first, or wait for it to finish.")
