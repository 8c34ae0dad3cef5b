"""Engine exceptions; the web layer maps each one to a single HTTP status."""

from __future__ import annotations


class EngineError(Exception):
    """Base class for every error the engine raises on purpose."""


class PromptTooLongError(EngineError, ValueError):
    """The prompt (plus max_tokens when set) does not fit in max_model_len (HTTP 400)."""


class QueueFullError(EngineError):
    """The waiting queue is at max_queue_len (HTTP 503)."""


class RequestFailedError(EngineError):
    """The engine failed while running this one request; it alone ended, the others go on (HTTP 500).

    The message is generic on purpose: the cause is logged with the request id, not shown to clients.
    """


class EngineBrokenError(EngineError):
    """Steps keep failing whatever runs in them: the engine itself is broken and must be restarted."""


class EngineDeadError(EngineError):
    """The engine thread crashed or was shut down; pending and new requests fail (HTTP 503)."""


class UnknownModelError(EngineError, KeyError):
    """No model is registered under that name or alias (HTTP 404)."""

    def __str__(self) -> str:
        # KeyError quotes its argument; a readable message matters more here.
        return str(self.args[0]) if self.args else "unknown model"


class NoModelLoadedError(EngineError):
    """The model exists but is not loaded, or there is no default model (HTTP 503)."""


class InsufficientMemoryError(EngineError):
    """Loading a model would exceed the manager's memory budget and eviction cannot help."""


class UpstreamUnavailableError(EngineError):
    """An `openai` engine's upstream server cannot serve now: unreachable, timed out, failing (5xx),
    overloaded (429) or refusing our credentials. Worth retrying after `retry_after` seconds (HTTP 503)."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UpstreamRejectedError(EngineError):
    """An `openai` engine's upstream refused this request as invalid (its 400, 413 or 422); the message is
    the upstream's own, meant for the client (HTTP 400)."""

    def __init__(self, message: str, *, status: int, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


class UnsupportedTaskError(EngineError, ValueError):
    """The model is not served for this task: an embedding model asked to generate, or the reverse
    (HTTP 400)."""
