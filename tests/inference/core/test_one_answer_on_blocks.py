"""One answer however requests arrive, on the GGUF block paths (issue 45): copies of one greedy request,
arriving at staggered steps beside long prompts (so they are batched with different company, chunked by the
token budget, found in the prefix cache and preempted by a small KV cache), all get the tokens and the very
logprobs the request gets alone, on the AVX2 path (fp32) and the AVX512 one (bf16).

Where decoding rows take their own kernels (the AVX512 block reads, a fused layer stack), a sequence
recomputed after a preemption replays its generated tokens as decoding rows, one per step, as they were
first computed; recomputed as a prompt chunk, they took the batch path and the answer then went another way.

The AVX2 path once gave two answers to one Responses request: torch's fp32 SDPA computed a row differently
by batch size and by chunk (a prompt's last row as a one-token chunk over the prefix cache differed from the
same row in the whole prompt), and the 14-bit activations of the block linears turn such last-bit
differences into level flips. Every row now attends through csrc/avx2/paged_attention.cpp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inference import LLMEngine, SamplingParams
from inference.models.kernels import build as kernel_build
from inference.models.layers.attention.torch_backend import TorchAttentionBackend
from inference.models.loader.load import LoadedModel, load_model
from tests.inference.real_model import make_engine, runner_of

pytestmark = pytest.mark.slow

Answer = tuple[tuple[int, ...], tuple[float, ...]]
LONG_TEXT = "The history of the river valley is long and full of small events that nobody wrote down. " * 12


@pytest.fixture(scope="module", params=["avx2", "avx512"])
def on_blocks(request: pytest.FixtureRequest, test_cache_dir: Path) -> LoadedModel:
    """The bundled Q4_1 model with only its blocks (no dense copy), through either ISA's kernels."""
    isa = str(request.param)
    if isa == "avx2" and not kernel_build.avx2_supported():
        pytest.skip("this CPU lacks AVX2")
    if isa == "avx512" and not kernel_build.cpu_supported():
        pytest.skip("this CPU lacks AVX512-BF16")
    return load_model("default", device="cpu", cache_dir=test_cache_dir, gguf_dense_copy=False, cpu_isa=isa)


def chat(loaded: LoadedModel, text: str) -> list[int]:
    tokenizer: Any = loaded.tokenizer  # apply_chat_template's declared return covers every option
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )
    return [int(t) for t in (ids if isinstance(ids, list) else ids["input_ids"])]


def engine_for(loaded: LoadedModel) -> LLMEngine:
    """Chunks of at most 48 tokens, and a cache of about 360 tokens: the long prompts' decoding preempts."""
    # Layers, K and V, heads, dim, in 2 bytes: either default cache is 16-bit (bf16 where the model computes
    # in bf16, else fp16).
    bytes_per_token = 30 * 2 * 3 * 64 * 2
    return make_engine(
        loaded,
        dtype="auto",
        cpu_isa="avx512" if loaded.avx512_kernels else "avx2",
        gguf_dense_copy=False,
        max_model_len=320,
        max_num_batched_tokens=48,
        max_num_seqs=8,
        kv_cache_memory_bytes=360 * bytes_per_token,
        max_step_latency_ms=None,
    )


def answers(engine: LLMEngine, ids: list[str]) -> dict[str, Answer]:
    """Step until idle; each of `ids`' finished (tokens, chosen tokens' logprobs)."""
    done: dict[str, Answer] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished and out.request_id in ids:
                completion = out.outputs[0]
                logprobs = tuple(chosen.logprob for chosen, _ in completion.logprobs or [])
                done[out.request_id] = (tuple(completion.token_ids), logprobs)
    return done


def test_identical_greedy_requests_get_one_answer_and_one_logprob_whatever_their_company(
    on_blocks: LoadedModel,
) -> None:
    engine = engine_for(on_blocks)
    backend = runner_of(engine).backend
    assert isinstance(backend, TorchAttentionBackend) and backend.native  # every row through the native op
    target = chat(on_blocks, "Say hello.")
    params = SamplingParams(temperature=0, max_tokens=24, logprobs=0)
    alone_id = engine.add_request(None, target, params)
    alone = answers(engine, [alone_id])[alone_id]
    assert len(alone[0]) > 8
    longs = [chat(on_blocks, LONG_TEXT[: 300 * n] + " Summarize that.") for n in (2, 3, 4)]
    long_params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    # (long prompts, copies) added before each step: copies that find the whole prompt cached (a one-token
    # chunk), copies whose prompt shares chunks with a long one, copies decoding beside long prefills.
    waves = [(1, 1), (0, 2), (0, 0), (1, 1), (0, 0), (0, 3), (1, 0), (0, 1), (0, 0), (0, 0), (0, 2)]
    ids: list[str] = []
    for step, (new_longs, copies) in enumerate(waves):
        for n in range(new_longs):
            engine.add_request(None, longs[(step + n) % len(longs)], long_params)
        ids += [engine.add_request(None, target, params) for _ in range(copies)]
        engine.step()
    got = answers(engine, ids)
    stats = engine.stats()
    assert stats.prefix_cache_hits > 0 and stats.num_preemptions > 0
    assert len(got) == len(ids) == 10
    assert all(answer[0] == alone[0] for answer in got.values()), "two greedy answers to one request"
    assert all(answer == alone for answer in got.values()), "one answer, but logprobs that differ"
