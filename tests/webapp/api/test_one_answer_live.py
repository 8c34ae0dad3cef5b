"""One answer however requests arrive, through a live server's /v1/responses (issue 45): copies of one greedy
request, streamed and not, sent at staggered moments beside long prompts, all get the text a copy sent alone
got. The engine-level test (tests/inference/core/test_one_answer_on_blocks.py) covers the arrivals this
cannot pin down (chunk cuts, preemption); this one covers the server's own path to the engine."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.webapp.api.live import MODEL

pytestmark = pytest.mark.slow

REQUEST: dict[str, Any] = {"model": MODEL, "input": "Say hello.", "max_output_tokens": 30, "temperature": 0}
# About 400 tokens, under the 2048-character input limit.
LONG = "The history of the river valley is long and full of small events that nobody wrote down. " * 20


def answer(oai: Any, streamed: bool, delay: float) -> str:
    time.sleep(delay)
    if not streamed:
        return str(oai.responses.create(**REQUEST).output_text)
    with oai.responses.stream(**REQUEST) as stream:
        return "".join(event.delta for event in stream if event.type == "response.output_text.delta")


def long_prompt(oai: Any, delay: float) -> None:
    time.sleep(delay)
    oai.responses.create(model=MODEL, input=LONG + " Summarize.", max_output_tokens=40, temperature=0)


def test_identical_greedy_responses_get_one_answer_streamed_or_not_beside_long_prompts(oai: Any) -> None:
    alone = answer(oai, streamed=True, delay=0)
    assert alone
    with ThreadPoolExecutor(10) as pool:
        longs = [pool.submit(long_prompt, oai, delay) for delay in (0.0, 0.3)]
        copies = [pool.submit(answer, oai, i % 2 == 0, 0.15 * i) for i in range(8)]
        texts = [copy.result() for copy in copies]
        for done in longs:
            done.result()
    assert texts == [alone] * len(texts)
