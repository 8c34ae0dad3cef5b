"""Speculative decoding and async scheduling served for real, on the session's models-list server
(tests/webapp/live_models.py): the bundled model in bf16, plain, with n-gram speculation and with async
scheduling. Greedy streams of a reply that repeats its prompt are the same text on all three, alone and
four at once, and /metrics shows the drafts that were accepted on the speculative one only."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.live_models import sse_data

pytestmark = pytest.mark.slow

PLAIN = "smol-bf16"
EDIT = (
    "Repeat this text exactly, fixing nothing: The committee met on Monday to discuss the budget for the "
    "new library. After a long debate, the committee agreed to fund the reading room and the archive."
)


def _stream(server: LiveDaphne, model: str) -> tuple[str, dict[str, Any]]:
    """The streamed reply's text and its usage, after checking the stream's framing."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": EDIT}],
        "temperature": 0,
        "max_tokens": 48,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = sse_data(server, body, timeout=300)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    return text, chunks[-1]["usage"]


def _accepted(server: LiveDaphne) -> dict[str, float]:
    """mooncake:spec_decode_num_accepted_tokens_total per model."""
    metrics = server.get("/metrics")[1].decode()
    pattern = r'^mooncake:spec_decode_num_accepted_tokens_total\{[^}]*model_name="([^"]+)"[^}]*\} (\S+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, metrics, re.MULTILINE)}


@pytest.fixture
def server(models_list_server: LiveDaphne) -> LiveDaphne:
    return models_list_server


def test_streams_are_the_same_text_with_speculation_and_async_scheduling(server: LiveDaphne) -> None:
    plain, usage = _stream(server, PLAIN)
    assert "committee" in plain  # the reply does repeat its prompt, so drafts have something to match
    before = _accepted(server)
    assert _stream(server, "smol-spec") == (plain, usage)
    assert _stream(server, "smol-async") == (plain, usage)
    after = _accepted(server)
    assert after["smol-spec"] - before.get("smol-spec", 0) > 10
    assert after.get(PLAIN, 0) == 0 and after.get("smol-async", 0) == 0


def test_concurrent_streams_agree_on_every_model(server: LiveDaphne) -> None:
    alone, _ = _stream(server, PLAIN)
    for model in (PLAIN, "smol-spec", "smol-async"):
        with ThreadPoolExecutor(4) as pool:
            texts = {text for text, _ in pool.map(_stream, [server] * 4, [model] * 4)}
        assert texts == {alone}, model
