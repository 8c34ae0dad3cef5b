"""The benchmarks' fixed chat prompts, shared so offline, profile and serving runs measure the same work."""

from __future__ import annotations

from typing import Any

TOPICS = ["the moon", "tea", "rivers", "old clocks", "bicycles", "winter", "bread", "libraries"]
ASKS = [
    "Write two sentences about {}.",
    "Explain {} to a child.",
    "List three facts about {}.",
    "Tell a short story about {}.",
    "Why do people like {}?",
    "Describe {} in detail.",
    "What is the history of {}?",
    "Give advice about {}.",
]


def question(i: int) -> str:
    """The i-th question: every ask over one topic, then the next topic."""
    return ASKS[i % len(ASKS)].format(TOPICS[(i // len(ASKS)) % len(TOPICS)])


def chat_prompt_ids(tokenizer: Any, count: int) -> list[list[int]]:
    """`count` questions as chat-templated token ids."""
    prompts = []
    for i in range(count):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": question(i)}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5 returns a BatchEncoding
        prompts.append([int(t) for t in ids])
    return prompts
