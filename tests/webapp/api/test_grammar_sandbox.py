"""Grammars are validated in a child process under time and memory limits before the server compiles them."""

from __future__ import annotations

import json
import time

import llguidance
import pytest

from webapp.api.services.grammar_sandbox import GrammarSandbox, GrammarTooComplex


def grammar(schema: dict[str, object]) -> str:
    return str(llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema)))


def intersected_patterns(n: int) -> str:
    # Each regex applies to the same string: llguidance checks their intersection, ~4x dearer per regex.
    return grammar({"allOf": [{"type": "string", "pattern": f".*a{i}.{{3}}"} for i in range(n)]})


PLAIN = grammar({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})


def test_a_plain_grammar_validates_and_the_child_is_reused() -> None:
    sandbox = GrammarSandbox(workers=1)
    try:
        assert sandbox.validate(PLAIN) == (False, "")
        started = time.monotonic()
        assert sandbox.validate(PLAIN) == (False, "")
        assert time.monotonic() - started < 1.0 and sandbox.replaced == 0
    finally:
        sandbox.close()


def test_a_grammar_past_the_time_limit_is_refused_and_its_child_replaced() -> None:
    sandbox = GrammarSandbox(workers=1, timeout_s=0.5)
    try:
        with pytest.raises(GrammarTooComplex, match=r"more than 0\.5 s") as caught:
            sandbox.validate(intersected_patterns(20))
        # Stopped within a poll of its processor-time budget, however busy the machine (not a wall clock).
        used = caught.value.cpu_seconds
        assert used is not None and 0.5 < used < 0.8 and sandbox.replaced == 1
        assert sandbox.validate(PLAIN) == (False, "")  # a fresh child serves the next one
    finally:
        sandbox.close()


def test_a_grammar_past_the_memory_limit_kills_only_the_child() -> None:
    # 15 intersected regexes need ~2 GB; capped at 300 MB the child dies (llguidance aborts), not the server.
    sandbox = GrammarSandbox(workers=1, timeout_s=30, memory_bytes=300 << 20)
    try:
        with pytest.raises(GrammarTooComplex, match="more memory"):
            sandbox.validate(intersected_patterns(15))
        assert sandbox.validate(PLAIN) == (False, "")
    finally:
        sandbox.close()


def test_an_invalid_grammar_is_an_answer_not_a_failure() -> None:
    sandbox = GrammarSandbox(workers=1)
    try:
        is_error, message = sandbox.validate(intersected_patterns(10))
        assert is_error and "regex" in message
    finally:
        sandbox.close()


def test_close_stops_the_children() -> None:
    sandbox = GrammarSandbox(workers=2)
    sandbox.validate(PLAIN)
    workers = [w for w in list(sandbox._idle.queue) if w is not None]
    assert workers and all(w.process.poll() is None for w in workers)
    sandbox.close()
    assert all(w.process.poll() is not None for w in workers)


def test_start_spawns_the_children_before_any_request() -> None:
    sandbox = GrammarSandbox(workers=2)
    try:
        sandbox.start()
        workers = list(sandbox._idle.queue)
        assert len(workers) == 2 and all(w is not None and w.process.poll() is None for w in workers)
        sandbox.validate(PLAIN)
        assert {id(w) for w in sandbox._idle.queue} == {id(w) for w in workers}  # no new child
    finally:
        sandbox.close()
