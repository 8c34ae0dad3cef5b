"""Helpers for the real-model engine tests: prompts, engines over the shared model, the HF oracle."""

from __future__ import annotations

from typing import Any

import torch

from inference import EngineConfig, LLMEngine, SamplingParams
from inference.core.model_io import ScheduledChunk
from inference.core.model_runner import ModelRunner

MAX_TOKENS = 24
SYSTEM = (
    "You are Mooncake, a concise assistant running on a small self-hosted server. Answer in one or two "
    "sentences, be accurate, and say so when you do not know."
)
PLAIN = [
    "Hi",
    "The capital of France is",
    "Once upon a time, in a village at the edge of a great forest, there lived an old clockmaker who "
    "repaired every clock in the valley. His workshop smelled of oil and pine, and the ticking never "
    "stopped, not even at night. One winter morning a stranger knocked on his door carrying",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
]
QUESTIONS = [
    "What is 2 + 2?",
    "Name three colours of the rainbow.",
    "Why is the sky blue?",
    "Write a haiku about tea.",
]


def prompts(tokenizer: Any) -> list[list[int]]:
    """Plain and chat-templated prompts; the chat ones share a system prompt longer than one block."""
    plain = [list(tokenizer.encode(p)) for p in PLAIN]
    chat = [chat_ids(tokenizer, q) for q in QUESTIONS]
    return plain + chat


def chat_ids(tokenizer: Any, question: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        add_generation_prompt=True,
        tokenize=True,
    )
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def make_engine(loaded: Any, **overrides: Any) -> LLMEngine:
    """An engine over the shared fp32 CPU model; the newest one owns the model's KV binding."""
    config: dict[str, Any] = {
        "model": "default",
        "dtype": "float32",
        "device": "cpu",
        "max_model_len": 512,
        "kv_cache_memory_bytes": 48 << 20,
    }
    config.update(overrides)
    return LLMEngine(EngineConfig(**config), loaded=loaded)


@torch.inference_mode()
def hf_greedy(
    model: Any, prompt: list[int], eos: set[int], *, max_new_tokens: int = MAX_TOKENS
) -> tuple[list[int], list[float]]:
    """HF generate(do_sample=False) tokens, and the log_softmax of HF's raw logits at each chosen token."""
    ids = torch.tensor([prompt])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=sorted(eos),
        pad_token_id=sorted(eos)[0],
        output_logits=True,
        return_dict_in_generate=True,
    )
    tokens = out.sequences[0, len(prompt) :].tolist()
    logprobs = [
        torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, tokens, strict=False)
    ]
    return tokens, logprobs


@torch.inference_mode()
def worst_gap_to_fp32(reference: Any, all_prompts: list[list[int]], outputs: list[Any]) -> float:
    """Teacher-forced through `reference` (HF in fp32): the largest amount by which a greedy pick of ours
    falls below the reference's top logit at its position (0 when every pick is the reference's top)."""
    worst = 0.0
    for prompt, out in zip(all_prompts, outputs, strict=True):
        tokens = out.outputs[0].token_ids
        assert tokens, f"no tokens for a prompt of {len(prompt)} tokens"
        logits = reference(torch.tensor([prompt + tokens])).logits[0].float()
        at_choice = logits[len(prompt) - 1 : len(prompt) - 1 + len(tokens)]
        gap = at_choice.max(-1).values - at_choice[torch.arange(len(tokens)), torch.tensor(tokens)]
        worst = max(worst, gap.max().item())
    return worst


def runner_of(engine: LLMEngine) -> ModelRunner:
    assert isinstance(engine.runner, ModelRunner)
    return engine.runner


def decode_chunks(engine: LLMEngine, num_prompts: int, steps: int) -> list[ScheduledChunk]:
    """The chunks of a decode-only step, after `steps` steps of `num_prompts` greedy chat prompts."""
    for prompt in prompts(engine.tokenizer)[-num_prompts:]:
        engine.add_request(None, prompt, SamplingParams(temperature=0, max_tokens=64))
    for _ in range(steps):
        engine.step()
    chunks = engine.scheduler.schedule().chunks
    assert len(chunks) == num_prompts and all(c.num_tokens == 1 for c in chunks)
    return chunks
