"""Our models through the ModelRunner and paged cache vs Hugging Face reference models (fp32, CPU)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inference.core.model_io import ScheduledChunk
from inference.core.model_runner import ModelRunner
from inference.models.loader.load import LoadedModel, load_model

ATOL = 5e-4  # measured max |diff| is ~1e-4 on logits of magnitude ~40
BLOCK = 16
PROMPTS = [
    "The capital of France is",
    "Write a haiku about autumn leaves falling slowly into a quiet river at dusk.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
]


class Blocks:
    """Disjoint physical block ranges per sequence, as a block manager would hand out."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, num_tokens: int) -> list[int]:
        n = -(-num_tokens // BLOCK)
        self.next += n
        return list(range(self.next - n, self.next))


def make_runner(loaded: LoadedModel, kv_bytes: int = 32 << 20) -> ModelRunner:
    return ModelRunner(
        loaded,
        block_size=BLOCK,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=None,
        kv_cache_memory_bytes=kv_bytes,
        gpu_memory_utilization=0.9,
    )


def hf_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def chat_ids(loaded: LoadedModel, text: str) -> list[int]:
    messages = [{"role": "user", "content": text}]
    out = loaded.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(loaded.tokenizer.encode(out))


def run_schedule(
    runner: ModelRunner, seqs: dict[str, list[int]], steps: list[dict[str, int]]
) -> dict[str, torch.Tensor]:
    """Feed each sequence in the given per-step token counts (mixed in one batch); collect every logit row."""
    blocks = Blocks()
    tables = {name: blocks.take(len(ids)) for name, ids in seqs.items()}
    done = dict.fromkeys(seqs, 0)
    rows: dict[str, list[torch.Tensor]] = {name: [] for name in seqs}
    for step in steps:
        names = list(step)
        chunks = [ScheduledChunk(seqs[n], done[n], step[n], tables[n], return_all_logits=True) for n in names]
        out = runner.execute(chunks)
        for i, n in enumerate(names):
            torch.testing.assert_close(out.last[i], out.all_positions[i][-1], atol=1e-4, rtol=0)
            rows[n].append(out.all_positions[i])
            done[n] += step[n]
    return {n: torch.cat(r) for n, r in rows.items()}


@pytest.mark.parametrize("prompt", PROMPTS)
def test_full_prefill_matches_hf(
    default_loaded: LoadedModel, hf_reference: torch.nn.Module, prompt: str
) -> None:
    ids = chat_ids(default_loaded, prompt)
    runner = make_runner(default_loaded)
    ours = run_schedule(runner, {"a": ids}, [{"a": len(ids)}])["a"]
    torch.testing.assert_close(ours, hf_logits(hf_reference, ids), atol=ATOL, rtol=0)


def test_chunked_prefill_and_decode_match_full_forward(
    default_loaded: LoadedModel, hf_reference: torch.nn.Module
) -> None:
    ids = chat_ids(default_loaded, PROMPTS[1])
    n = len(ids)
    # Uneven chunks cross block boundaries; the last 4 tokens arrive one decode step at a time.
    steps = [{"a": 7}, {"a": 20}, {"a": n - 31}, {"a": 1}, {"a": 1}, {"a": 1}, {"a": 1}]
    ours = run_schedule(make_runner(default_loaded), {"a": ids}, steps)["a"]
    torch.testing.assert_close(ours, hf_logits(hf_reference, ids), atol=ATOL, rtol=0)


def test_mixed_batch_matches_per_sequence(default_loaded: LoadedModel, hf_reference: torch.nn.Module) -> None:
    seqs = {name: chat_ids(default_loaded, p) for name, p in zip("abc", PROMPTS, strict=True)}
    na, nb, nc = (len(seqs[k]) for k in "abc")
    steps = [
        {"b": nb - 2, "c": 16},  # b prefills, c's first chunk
        {"a": na - 3, "b": 1, "c": nc - 18},  # a prefills while b decodes and c continues
        {"a": 1, "b": 1, "c": 1},  # decode-only batch (the batched gather path)
        {"a": 2, "c": 1},  # a two-token chunk next to a decode
    ]
    ours = run_schedule(make_runner(default_loaded), seqs, steps)
    for name, ids in seqs.items():
        torch.testing.assert_close(ours[name], hf_logits(hf_reference, ids), atol=ATOL, rtol=0)


def test_prefix_cache_hit_reads_shared_blocks(
    default_loaded: LoadedModel, hf_reference: torch.nn.Module
) -> None:
    runner = make_runner(default_loaded)
    first = chat_ids(default_loaded, PROMPTS[1])
    second = first[:32] + chat_ids(default_loaded, "Something else entirely.")[:9]
    runner.execute([ScheduledChunk(first, 0, len(first), list(range(4)))])
    # `second` reuses first's two full blocks and computes only its own tail, starting at position 32.
    out = runner.execute(
        [ScheduledChunk(second, 32, len(second) - 32, [0, 1, 10, 11], return_all_logits=True)]
    )
    torch.testing.assert_close(out.all_positions[0], hf_logits(hf_reference, second)[32:], atol=ATOL, rtol=0)


def test_step_logits_shape_and_dtype(default_loaded: LoadedModel) -> None:
    runner = make_runner(default_loaded)
    out = runner.execute([ScheduledChunk([1, 2, 3], 0, 3, [0]), ScheduledChunk([4, 5], 0, 2, [1])])
    assert out.last.shape == (2, runner.vocab_size) and out.last.dtype == torch.float32
    assert out.all_positions == {}


@pytest.mark.parametrize(
    "name",
    [
        "llama-rope-llama3",
        "llama-rope-linear-bias",
        "qwen2",
        "qwen3",
        "mixtral",
        "qwen2-moe",
        "qwen3-moe",
        "olmoe",
        "mistral-window",
        "gemma2",
        "gemma3",
        "phi3-longrope",
    ],
)
def test_tiny_architectures_match_hf(tiny_model_dir: Callable[[str], Path], name: str) -> None:
    from transformers import AutoModelForCausalLM

    model_dir = tiny_model_dir(name)
    loaded = load_model(str(model_dir), dtype="float32", device="cpu")
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(1)
    # Long enough (130 tokens) for llama3 rope scaling's low-frequency band to matter.
    seqs = {k: torch.randint(0, 512, (n,), generator=gen).tolist() for k, n in (("a", 130), ("b", 40))}
    steps = [{"a": 100, "b": 10}, {"a": 28, "b": 27}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"b": 1}]
    ours = run_schedule(make_runner(loaded, kv_bytes=4 << 20), seqs, steps)
    for key, ids in seqs.items():
        torch.testing.assert_close(ours[key], hf_logits(reference, ids), atol=1e-4, rtol=0)
