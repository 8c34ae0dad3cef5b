"""inference.frontends.base: what the front-ends share (the remote and transformers engines' own tests
and the live suites run it on real engines)."""

from __future__ import annotations

from typing import Any


def test_a_request_is_finished_once_every_choice_is() -> None:
    from inference.frontends.base import request_output
    from inference.outputs import CompletionOutput, RequestMetrics

    def choice(index: int, finish: Any) -> CompletionOutput:
        return CompletionOutput(index, "a", [1], "a", [1], None, finish_reason=finish)

    metrics = RequestMetrics(arrival_time=1.0)
    running = request_output("r", "p", [5], [choice(0, "stop"), choice(1, None)], metrics)
    assert not running.finished and running.prompt == "p" and running.prompt_token_ids == [5]
    assert request_output("r", None, [5], [choice(0, "stop"), choice(1, "length")], metrics).finished
