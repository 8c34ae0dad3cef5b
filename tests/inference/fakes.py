"""Test doubles for the engine core: a byte-level tokenizer and a runner that checks its KV cache.

FakeRunner stores (position, token) in each KV slot it writes and, before producing logits, reads back
every slot of the chunk's context. A wrong block table, a bad prefix-cache hit or a broken fork shows up
as an AssertionError instead of silently different text. Its logits depend only on the context, so a
reference continuation can be computed without any cache (`reference_greedy`).
"""

from __future__ import annotations

import hashlib
import time
from types import SimpleNamespace
from typing import Any

import torch

from inference.config import EngineConfig
from inference.core.engine import LLMEngine
from inference.core.model_io import InFlightIds, ScheduledChunk, StepLogits
from inference.frontends.local.async_engine import AsyncEngine

EOS = 256
VOCAB = 260


class ByteTokenizer:
    """Token i < 256 is byte i; 256 is EOS; 257.. are other special tokens."""

    eos_token_id = EOS

    def encode(self, text: str, **_: Any) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int], skip_special_tokens: bool = False, **_: Any) -> str:
        out = bytearray()
        text = ""
        for t in ids:
            if t < 256:
                out.append(t)
            elif not skip_special_tokens:
                text += out.decode("utf-8", errors="replace") + f"<s{t}>"
                out = bytearray()
        return text + out.decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict[str, Any]], **_: Any) -> list[int]:
        return self.encode("".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>")


def context_logits(context: list[int]) -> torch.Tensor:
    """Deterministic logits from the last few tokens and the length (ASCII letters favoured)."""
    digest = hashlib.sha256(repr((context[-3:], len(context))).encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
    logits = torch.randn(VOCAB, generator=g)
    logits[97:123] += 3.0  # keep greedy text printable
    logits[EOS] -= 4.0
    return logits


def reference_greedy(prompt: list[int], max_tokens: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(int(context_logits(tokens).argmax()))
    return tokens[len(prompt) :]


class FakeRunner:
    def __init__(self, *, num_blocks: int = 64, block_size: int = 4, max_model_len: int = 128) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.kv_capacity_tokens = num_blocks * block_size
        self.kv_window: int | None = None
        self.rows_apart = False  # one path for every row: recomputed sequences take a prompt chunk
        self.kv_cache_bytes = num_blocks * block_size * 8
        self.vocab_size = VOCAB
        self.kv: dict[int, tuple[int, int]] = {}
        self.calls: list[list[tuple[int, int]]] = []  # (start, num_tokens) per chunk, per step
        self.fail_with: Exception | None = None
        self.supports_in_flight_ids = True
        self.in_flight_rows = 0  # input ids taken from a step still in flight (async scheduling)

    def slot(self, chunk: ScheduledChunk, pos: int) -> int:
        return chunk.block_table[pos // self.block_size] * self.block_size + pos % self.block_size

    def execute(self, chunks: list[ScheduledChunk], in_flight: InFlightIds | None = None) -> StepLogits:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append([(c.start, c.num_tokens) for c in chunks])
        if in_flight is not None:  # as the model runner does: patch the flat input ids, here on the CPU
            flat = torch.tensor([t for c in chunks for t in c.token_ids[c.start : c.start + c.num_tokens]])
            in_flight.patch(flat)
            chunks = _with_ids(chunks, flat.tolist())
            self.in_flight_rows += len(in_flight.dst)
        assert all(t >= 0 for c in chunks for t in c.token_ids[: c.start + c.num_tokens]), "a placeholder ran"
        rows, all_positions = [], {}
        for i, chunk in enumerate(chunks):
            end = chunk.start + chunk.num_tokens
            assert chunk.num_tokens > 0 and end <= len(chunk.token_ids)
            assert len(chunk.block_table) * self.block_size >= end
            for pos in range(chunk.start, end):
                self.kv[self.slot(chunk, pos)] = (pos, chunk.token_ids[pos])
            for pos in range(end):
                assert self.kv.get(self.slot(chunk, pos)) == (pos, chunk.token_ids[pos]), f"stale KV at {pos}"
            rows.append(context_logits(chunk.token_ids[:end]))
            if chunk.return_all_logits:
                all_positions[i] = torch.stack(
                    [context_logits(chunk.token_ids[: p + 1]) for p in range(chunk.start, end)]
                )
        return StepLogits(last=torch.stack(rows), all_positions=all_positions)


def _with_ids(chunks: list[ScheduledChunk], flat: list[int]) -> list[ScheduledChunk]:
    """The chunks with their computed tokens taken from `flat` (copies: the sequences keep theirs)."""
    out, offset = [], 0
    for c in chunks:
        end = c.start + c.num_tokens
        ids = [*c.token_ids[: c.start], *flat[offset : offset + c.num_tokens], *c.token_ids[end:]]
        out.append(ScheduledChunk(ids, c.start, c.num_tokens, c.block_table, c.return_all_logits))
        offset += c.num_tokens
    return out


def fake_loaded() -> Any:
    model = torch.nn.Linear(2, 2)
    return SimpleNamespace(
        model=model,
        tokenizer=ByteTokenizer(),
        eos_token_ids={EOS},
        architecture="FakeForCausalLM",
        num_params=6,
        dtype=torch.float32,
        size_on_disk=0,
        source="fake",
    )


def fake_engine(
    *, num_blocks: int = 64, block_size: int = 4, max_model_len: int = 128, **config: Any
) -> LLMEngine:
    runner = FakeRunner(num_blocks=num_blocks, block_size=block_size, max_model_len=max_model_len)
    cfg = EngineConfig(model="fake", block_size=block_size, **config)
    return LLMEngine(cfg, loaded=fake_loaded(), runner=runner)


def slow_async_engine(*, max_num_seqs: int = 2, max_model_len: int = 200) -> AsyncEngine:
    """Few sequences at a time and a slow step, so further requests stay queued (restart tests)."""
    llm = fake_engine(max_model_len=max_model_len, max_num_seqs=max_num_seqs)
    execute = llm.runner.execute
    llm.runner.execute = lambda chunks: (time.sleep(0.01), execute(chunks))[1]
    return AsyncEngine(llm)
