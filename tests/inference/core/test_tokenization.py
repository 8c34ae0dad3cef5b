"""TextProcessor: the tokenizer's one owner; calls are serialized and the async ones leave the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from inference import AsyncEngine, SamplingParams
from inference.core.tokenization import TextProcessor
from tests.inference.fakes import ByteTokenizer, fake_engine, reference_greedy


class RecordingTokenizer(ByteTokenizer):
    """Records the thread of each call and how many calls overlap (a fast tokenizer must not see any)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.threads: list[str] = []
        self.inside = 0
        self.most_inside = 0

    def _enter(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        time.sleep(self.delay)  # releases the GIL, as the Rust tokenizer does
        self.inside -= 1

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self._enter()
        return super().encode(text, **kwargs)

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        self._enter()
        return super().apply_chat_template(messages, **kwargs)


def test_encode_template_and_decode() -> None:
    text = TextProcessor(ByteTokenizer())
    assert text.encode("hi") == [104, 105]
    assert text.encode([1, 2]) == [1, 2]  # ids pass through
    ids = text.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text.decode(ids) == "<user>hi<assistant>"


def test_calls_from_many_threads_never_overlap() -> None:
    tokenizer = RecordingTokenizer(delay=0.005)
    text = TextProcessor(tokenizer)
    threads = [
        threading.Thread(target=text.encode, args=("x",)),
        threading.Thread(target=text.apply_chat_template, args=([{"role": "user", "content": "y"}],)),
        threading.Thread(target=text.encode, args=("z",)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(tokenizer.threads)) == 3 and tokenizer.most_inside == 1


def test_generate_tokenizes_a_text_prompt_off_the_event_loop() -> None:
    llm = fake_engine(max_model_len=200)
    tokenizer = RecordingTokenizer()
    llm.text = TextProcessor(tokenizer, name="fake")
    engine = AsyncEngine(llm)
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)

    async def run() -> list[int]:
        outs = [out async for out in engine.generate("hello", params)]
        return outs[-1].outputs[0].token_ids

    try:
        loop_thread = threading.current_thread().name
        assert asyncio.run(run()) == reference_greedy(list(b"hello"), 3)
    finally:
        engine.shutdown()
    assert tokenizer.threads and loop_thread not in tokenizer.threads
    assert all(name.startswith("mooncake-text-fake") for name in tokenizer.threads)
