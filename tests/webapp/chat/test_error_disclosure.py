"""Chat shows a reference, not the engine's crash text; the log has the text under that reference."""

from __future__ import annotations

import logging

import pytest

from inference.api import EngineError, RequestFailedError
from webapp.chat.errors import from_engine

SECRET = "CUDA error: out of memory at /opt/secret/weights.safetensors"


@pytest.mark.parametrize("exc", [RuntimeError(SECRET), EngineError(SECRET), RequestFailedError(SECRET)])
def test_engine_failure_is_generic_with_a_logged_reference(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="webapp.chat.errors"):
        error = from_engine(exc, model="m")
    assert error.code == "engine_error" and "CUDA" not in error.message and "/opt" not in error.message
    reference = error.message.rsplit("reference ", 1)[1].rstrip(").")
    assert reference and any(SECRET in r.getMessage() and reference in r.getMessage() for r in caplog.records)
