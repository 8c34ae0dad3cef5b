"""The chat's renderer of the error hierarchy: an inline notice (a code the UI knows, and a sentence).

Services raise webapp.core.errors; the socket shows the notice in the composer's place, a reply that
failed mid-way keeps it as its error text. Engine exceptions that reach here unmapped go through
from_engine_error first, which logs their details under a reference and keeps them off the page.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from webapp.core.errors import (
    Conflict,
    InvalidRequest,
    MooncakeError,
    NotFound,
    RateLimited,
    from_engine_error,
)


@dataclass(frozen=True, slots=True)
class Notice:
    """What the chat shows: `code` for the UI and tests, `message` for the user; `status` is the HTTP
    status the API would have answered, for the request log."""

    code: str
    message: str
    status: int = 500


TOO_LONG_ADVICE = "Start a new chat or edit an earlier message."


def notice_for(exc: BaseException, *, model: str, loading: bool = False) -> Notice:
    """The notice for an error met while sending to or replying in a chat whose model is `model`
    ("" for the default); `loading`: the chat's model is still loading."""
    error = from_engine_error(exc, loading=loading)
    return replace(_notice(exc, error, model=model, loading=loading), status=error.status)


def _notice(exc: BaseException, error: MooncakeError, *, model: str, loading: bool) -> Notice:
    code = error.code
    if code == "context_length_exceeded":
        return Notice(
            "context_too_long",
            f"This conversation is too long for the model: {error.message} {TOO_LONG_ADVICE}",
        )
    # Each names the model: another may well be loaded (webapp.serving.on_demand words its own refusals).
    named = model or "The default model"
    if code == "model_loading" or (code == "model_not_loaded" and loading):
        return Notice("model_loading", f"{named} is still loading. Try again in a moment.")
    if code == "model_not_loaded":
        return Notice("no_model", f"{named} is not loaded. Send again to load it, or pick another model.")
    if code == "model_not_found":
        return Notice(
            "unknown_model", f"The model “{model or 'default'}” is not available. Pick another in Settings."
        )
    if code == "queue_full":
        return Notice("busy", "The server is busy. Try again in a moment.")
    if isinstance(error, Conflict):
        return Notice("busy", error.message)
    if isinstance(error, RateLimited):
        if code == "requests_per_minute":
            return Notice(
                "rate_limited", "You are sending messages too quickly. Wait a moment and try again."
            )
        return Notice("rate_limited", error.message)
    if code == "engine_dead":
        return Notice(
            "engine_dead",
            "The model stopped unexpectedly and is restarting. Try again shortly"
            + (f" (reference {error.reference})." if error.reference else "."),
        )
    if isinstance(error, InvalidRequest):
        return Notice("invalid", error.message)
    if isinstance(error, NotFound):
        return Notice("not_found", error.message)
    if code == "engine_error" or not isinstance(exc, MooncakeError):
        # The engine's text can hold crash details (CUDA errors, paths): the page shows the reference
        # only, the log has the details under it (from_engine_error logged them).
        return Notice("engine_error", f"The model could not finish this reply (reference {error.reference}).")
    # Another of the hierarchy's errors (a timeout, a refusal): its own sentence is meant for users.
    return Notice(code or "server_error", error.message)
