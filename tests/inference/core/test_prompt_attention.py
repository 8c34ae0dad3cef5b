"""The native attention op (csrc/avx512/prompt_attention.cpp): correct against fp32, and each row computed the
same
way however its prompt is cut and whatever else the call holds; in the engine, a prompt's tokens then do not
depend on its chunking."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch

from inference import LLMEngine, SamplingParams
from inference.core.model_runner import ModelRunner
from inference.models.kernels import build as kernel_build
from inference.models.layers.attention.torch_backend import TorchAttentionBackend
from inference.models.loader.load import LoadedModel, load_model
from inference.models.quantization.gguf.avx512 import load_kernel
from tests.inference.real_model import chat_ids, make_engine

pytestmark = pytest.mark.skipif(
    not kernel_build.cpu_supported(), reason="the native kernels need AVX512-BF16"
)

Chunk = tuple[int, int, int]  # first row in q, rows, context length after the chunk


@pytest.fixture(scope="module", autouse=True)
def native_library(test_cache_dir: Path) -> None:
    assert load_kernel(test_cache_dir) is not None  # registers the library's ops in this process


class Cache:
    """A random paged KV cache and one shuffled block table per sequence."""

    def __init__(
        self, *, heads: int, kv_heads: int, head_dim: int, block_size: int = 16, seed: int = 0
    ) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.heads, self.kv_heads, self.head_dim, self.block_size = heads, kv_heads, head_dim, block_size
        shape = (96, block_size, kv_heads, head_dim)
        self.k = torch.randn(shape, generator=gen).bfloat16()
        self.v = torch.randn(shape, generator=gen).bfloat16()
        self.order = torch.randperm(96, generator=gen).int()
        self.gen = gen

    def table(self, sequence: int) -> torch.Tensor:
        return self.order.roll(17 * sequence)[:48]

    def queries(self, rows: int) -> torch.Tensor:
        return torch.randn(rows, self.heads, self.head_dim, generator=self.gen).bfloat16()

    def attend(
        self,
        q: torch.Tensor,
        chunks: list[Chunk],
        sequences: list[int],
        scale: float = 0.125,
        window: int = 0,
        softcap: float = 0.0,
    ) -> torch.Tensor:
        tables = torch.stack([self.table(s) for s in sequences]).contiguous()
        chunk_tensor = torch.tensor(chunks, dtype=torch.int64)
        if not window and not softcap:  # the op's defaults: the call without them stays valid
            return torch.ops.mooncake_avx512.prompt_attention(
                q.contiguous(), self.k, self.v, tables, chunk_tensor, scale
            )
        return torch.ops.mooncake_avx512.prompt_attention(
            q.contiguous(), self.k, self.v, tables, chunk_tensor, scale, window, softcap
        )

    def reference(
        self,
        q: torch.Tensor,
        start: int,
        sequence: int,
        scale: float = 0.125,
        window: int = 0,
        softcap: float = 0.0,
    ) -> torch.Tensor:
        """fp32 causal attention of rows at positions start.. over the sequence's cached keys; a row at p sees
        keys (p - window, p] where window > 0, scores soft-capped where softcap > 0."""
        rows, context = q.shape[0], start + q.shape[0]
        slots = (
            self.table(sequence).long()[:, None] * self.block_size + torch.arange(self.block_size)
        ).flatten()
        group = self.heads // self.kv_heads
        k = self.k.flatten(0, 1)[slots[:context]].float().repeat_interleave(group, 1)
        v = self.v.flatten(0, 1)[slots[:context]].float().repeat_interleave(group, 1)
        scores = torch.einsum("thd,khd->htk", q.float(), k) * scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        offset = (start + torch.arange(rows))[:, None] - torch.arange(context)[None, :]
        visible = (offset >= 0) & (offset < window if window else True)
        return torch.einsum("htk,khd->thd", scores.masked_fill(~visible, float("-inf")).softmax(-1), v)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim", "block_size"),
    [(9, 3, 64, 16), (8, 8, 64, 16), (16, 4, 128, 16), (4, 2, 32, 8), (6, 2, 64, 32)],
)
@pytest.mark.parametrize(("start", "rows"), [(0, 1), (0, 40), (300, 25), (37, 3), (113, 1)])
def test_rows_match_fp32_attention(
    heads: int, kv_heads: int, head_dim: int, block_size: int, start: int, rows: int
) -> None:
    cache = Cache(heads=heads, kv_heads=kv_heads, head_dim=head_dim, block_size=block_size)
    q = cache.queries(rows)
    out = cache.attend(q, [(0, rows, start + rows)], [0]).float()
    ref = cache.reference(q, start, 0)
    # bf16 output: within one rounding of the fp32 result (a wrong mask or head would be off by ~0.1-1).
    assert torch.allclose(out, ref, rtol=2**-7, atol=1e-3), (out - ref).abs().max()


def test_peaked_rows_flush_their_vanishing_probabilities_to_zero_and_stay_exact() -> None:
    """Scores 30x the usual spread: most of a row's probabilities fall below fp32's normal range. They count
    as zero (the kernel flushes subnormals, which otherwise cost a microcode assist each), so the rows still
    match fp32 attention, and the caller's own floating-point mode is left as it was."""
    import numpy as np

    cache = Cache(heads=8, kv_heads=2, head_dim=64)
    q = (cache.queries(300).float() * 30).bfloat16()
    tiny = np.float32(1e-40)  # subnormal: kept by this thread before and after the call
    out = cache.attend(q, [(0, 300, 300)], [0]).float()
    assert torch.allclose(out, cache.reference(q, 0, 0), rtol=2**-7, atol=1e-3)
    assert tiny * np.float32(1.0) != 0 and torch.tensor([1e-40]).item() != 0


def test_rows_do_not_depend_on_the_cut_or_the_company() -> None:
    cache = Cache(heads=9, kv_heads=3, head_dim=64)
    q = cache.queries(500)
    whole = cache.attend(q, [(0, 500, 500)], [0])
    cuts = [0, 1, 7, 16, 100, 101, 333, 480, 499, 500]
    pieces = list(itertools.pairwise(cuts))
    in_one_call = cache.attend(q, [(a, b - a, b) for a, b in pieces], [0] * len(pieces))
    one_by_one = torch.cat([cache.attend(q[a:b], [(0, b - a, b)], [0]) for a, b in pieces])
    assert torch.equal(in_one_call, whole)
    assert torch.equal(one_by_one, whole)
    # Beside other sequences' chunks (other tables, other lengths), in any order.
    others = cache.queries(60)
    mixed_q = torch.cat([others[:35], q[400:425], others[35:]])
    mixed = cache.attend(mixed_q, [(0, 35, 200), (35, 25, 425), (60, 25, 25)], [1, 0, 2])
    assert torch.equal(mixed[35:60], whole[400:425])


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(9, 3, 64), (16, 4, 128), (4, 2, 32)])
@pytest.mark.parametrize(("start", "rows"), [(0, 40), (300, 25), (37, 3), (113, 1), (5, 1)])
@pytest.mark.parametrize(("window", "softcap"), [(33, 0.0), (1, 0.0), (0, 1.5), (20, 3.0)])
def test_windowed_and_soft_capped_rows_match_fp32_attention(
    heads: int, kv_heads: int, head_dim: int, start: int, rows: int, window: int, softcap: float
) -> None:
    cache = Cache(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    # Scores several times the cap, so the cap bends them.
    q = (cache.queries(rows).float() * 4).bfloat16()
    out = cache.attend(q, [(0, rows, start + rows)], [0], window=window, softcap=softcap).float()
    ref = cache.reference(q, start, 0, window=window, softcap=softcap)
    assert torch.allclose(out, ref, rtol=2**-7, atol=1e-3), (out - ref).abs().max()


def test_windowed_rows_do_not_depend_on_the_cut_or_the_company() -> None:
    cache = Cache(heads=9, kv_heads=3, head_dim=64)
    q = cache.queries(300)
    options: dict[str, Any] = {"window": 37, "softcap": 2.0}
    whole = cache.attend(q, [(0, 300, 300)], [0], **options)
    cuts = [0, 5, 16, 40, 41, 170, 299, 300]
    pieces = list(itertools.pairwise(cuts))
    in_one_call = cache.attend(q, [(a, b - a, b) for a, b in pieces], [0] * len(pieces), **options)
    one_by_one = torch.cat([cache.attend(q[a:b], [(0, b - a, b)], [0], **options) for a, b in pieces])
    assert torch.equal(in_one_call, whole) and torch.equal(one_by_one, whole)
    others = cache.queries(30)
    mixed = cache.attend(torch.cat([others, q[200:230]]), [(0, 30, 90), (30, 30, 230)], [1, 0], **options)
    assert torch.equal(mixed[30:], whole[200:230])


def test_bad_inputs_are_refused() -> None:
    cache = Cache(heads=9, kv_heads=3, head_dim=64)
    q = cache.queries(4)
    tables = cache.table(0)[None].clone()
    chunks = torch.tensor([(0, 4, 20)], dtype=torch.int64)
    tables[0, 1] = 96  # past the cache's 96 blocks
    with pytest.raises(RuntimeError, match="block table entry out of the cache"):
        torch.ops.mooncake_avx512.prompt_attention(q, cache.k, cache.v, tables, chunks, 0.125)
    with pytest.raises(RuntimeError, match="chunk outside q"):
        cache.attend(q, [(2, 4, 20)], [0])
    with pytest.raises(RuntimeError, match="contiguous bf16"):
        torch.ops.mooncake_avx512.prompt_attention(q.float(), cache.k, cache.v, tables, chunks, 0.125)
    with pytest.raises(RuntimeError, match="window and softcap must be >= 0"):
        torch.ops.mooncake_avx512.prompt_attention(
            q, cache.k, cache.v, cache.table(0)[None], chunks, 0.125, -1
        )


@pytest.fixture(scope="module")
def bf16_model(test_cache_dir: Path) -> LoadedModel:
    return load_model("default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir)


def first_token_and_answer(engine: LLMEngine, prompt: list[int]) -> tuple[dict[int, float], list[int]]:
    params = SamplingParams(temperature=0, max_tokens=32, logprobs=5)
    [out] = engine.generate([prompt], params)
    completion = out.outputs[0]
    assert completion.logprobs
    _chosen, top = completion.logprobs[0]
    return {lp.token_id: lp.logprob for lp in top}, completion.token_ids


@pytest.mark.slow
def test_a_prompt_gives_the_same_logits_however_it_is_cut(bf16_model: LoadedModel) -> None:
    """Whole, in chunks of a small token budget (the last one a single token), and over a cached prefix:
    the first token's log-probabilities agree to the bit and the answers are equal."""
    prompt = chat_ids(bf16_model.tokenizer, "Write a haiku about the sea.")
    results: dict[int | str, tuple[dict[int, float], list[int]]] = {}
    for budget in (512, len(prompt) - 1, 17, 7):
        engine = make_engine(bf16_model, dtype="bfloat16", max_num_seqs=4, max_num_batched_tokens=budget)
        assert isinstance(engine.runner, ModelRunner)
        assert isinstance(engine.runner.backend, TorchAttentionBackend) and engine.runner.backend.native
        results[budget] = first_token_and_answer(engine, prompt)
        if budget == 512:
            results["cached"] = first_token_and_answer(engine, prompt)
            assert engine.stats().prefix_cache_hits > 0
    assert all(result == results[512] for result in results.values()), results
