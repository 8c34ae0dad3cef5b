"""Chat shows a reference, not the engine's crash text; the log has the text under that reference."""

from __future__ import annotations

import logging

import pytest

from inference.api import EngineDeadError, EngineError, RequestFailedError
from webapp.chat.errors import notice_for

SECRET = "CUDA error: out of memory at /opt/secret/weights.safetensors"


@pytest.mark.parametrize("exc", [RuntimeError(SECRET), EngineError(SECRET), RequestFailedError(SECRET)])
def test_engine_failure_is_generic_with_a_logged_reference(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="webapp.core.errors"):
        notice = notice_for(exc, model="m")
    assert notice.code == "engine_error" and "CUDA" not in notice.message and "/opt" not in notice.message
    reference = notice.message.rsplit("reference ", 1)[1].rstrip(").")
    assert reference and any(SECRET in r.getMessage() and reference in r.getMessage() for r in caplog.records)


def test_dead_engine_is_generic_with_a_reference() -> None:
    notice = notice_for(EngineDeadError(SECRET), model="m")
    assert notice.code == "engine_dead" and "CUDA" not in notice.message and "reference " in notice.message
