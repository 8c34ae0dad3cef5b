"""Small decode steps run every decoder layer in one native call, and agree with the module path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from inference import LLMEngine, SamplingParams
from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.kernels import build as kernel_build
from inference.models.loader.load import LoadedModel, load_model
from inference.models.quantization.amx_tiles import cpu_has_amx
from inference.models.quantization.gguf.fused_layers import FusedDecode
from tests.inference.real_model import (
    MAX_TOKENS,
    chat_ids,
    decode_chunks,
    make_engine,
    prompts,
    runner_of,
    worst_gap_to_fp32,
)

pytestmark = pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the Q4 kernels need AVX512-BF16")


@pytest.fixture(scope="module")
def bf16_model(test_cache_dir: Path) -> LoadedModel:
    return load_model("default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir)


def decoder(loaded: LoadedModel) -> DecoderForCausalLM:
    assert isinstance(loaded.model, DecoderForCausalLM)
    return loaded.model


@pytest.mark.parametrize("num_seqs", [1, 3])
def test_a_decode_step_takes_the_native_layers_and_agrees_with_the_modules(
    bf16_model: LoadedModel, num_seqs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(bf16_model, dtype="bfloat16", max_num_seqs=num_seqs)
    runner = runner_of(engine)
    fused = runner.fused_decode
    assert fused is not None and fused.max_rows >= num_seqs
    calls: list[int] = []
    original = FusedDecode.run

    def counted(self: FusedDecode, ids: np.ndarray, *rest: Any) -> torch.Tensor:
        calls.append(len(ids))
        return original(self, ids, *rest)

    monkeypatch.setattr(FusedDecode, "run", counted)
    chunks = decode_chunks(engine, num_seqs, steps=12)
    assert num_seqs in calls  # the engine's own decode steps went through it
    native = runner.execute(chunks).last
    runner.fused_decode = None
    modules = runner.execute(chunks).last  # rewrites the same slots with the module path's K/V
    runner.fused_decode = fused
    # The same weights and bf16 rounding points; only summation orders differ. A wrong head, rotary or
    # cache index moves logits by whole units, where this stays within a few bf16 steps of ~20.
    assert (native - modules).abs().max().item() < 1.0
    picks = native.argmax(-1)
    below_top = modules.max(-1).values - modules.gather(1, picks[:, None]).squeeze(1)
    assert below_top.max().item() < 0.5


@pytest.mark.slow
@torch.inference_mode()
def test_greedy_picks_through_the_native_layers_stay_on_what_fp32_ranks_first(
    bf16_model: LoadedModel, hf_reference: torch.nn.Module
) -> None:
    """The same bound as the module path's (test_q4_decode): within 0.25 of fp32's top logit."""
    all_prompts = prompts(bf16_model.tokenizer)
    engine = make_engine(bf16_model, dtype="bfloat16", max_num_seqs=3)
    assert runner_of(engine).fused_decode is not None
    outputs = engine.generate(all_prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    worst = worst_gap_to_fp32(hf_reference, all_prompts, outputs)
    assert worst < 0.25, f"a pick {worst:.3f} below fp32's top"


def test_only_bias_free_models_with_q4_blocks_take_it(
    bf16_model: LoadedModel, default_loaded: LoadedModel
) -> None:
    assert FusedDecode.build(decoder(default_loaded)) is None  # fp32 from the folder: no Q4 blocks
    model = decoder(bf16_model)
    make_engine(bf16_model, dtype="bfloat16", max_num_seqs=1)  # binds a cache
    args = model.args
    assert FusedDecode.build(model) is not None
    try:
        for flag in ("qkv_bias", "o_bias", "mlp_bias", "qk_norm"):
            flags: dict[str, Any] = {flag: True}
            model.args = replace(args, **flags)
            assert FusedDecode.build(model) is None, flag
    finally:
        model.args = args


@pytest.mark.parametrize("kv_cache_dtype", ["float16", "float32"])
def test_a_cache_that_is_not_bf16_keeps_the_module_path_and_says_so(
    bf16_model: LoadedModel, kv_cache_dtype: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The stack reads bf16 K/V in place; with another kv_cache_dtype the modules decode (and attend
    through SDPA, not the bf16 prompt_attention op), and still answer."""
    with caplog.at_level("INFO", logger="inference.models.quantization.gguf.fused_layers"):
        engine = make_engine(bf16_model, dtype="bfloat16", kv_cache_dtype=kv_cache_dtype, max_num_seqs=2)
    runner = runner_of(engine)
    assert runner.fused_decode is None and not getattr(runner.backend, "native", True)
    assert (
        "the fused decode stack needs a bfloat16 KV cache, and this one is " + kv_cache_dtype in caplog.text
    )
    prompt = chat_ids(bf16_model.tokenizer, "What is 2 + 2?")
    out = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 8


def test_indexes_outside_the_cache_are_refused_before_any_read(bf16_model: LoadedModel) -> None:
    engine = make_engine(bf16_model, dtype="bfloat16", max_num_seqs=1)
    fused = runner_of(engine).fused_decode
    assert fused is not None
    blocks, block_size = fused.k_caches[0].shape[:2]
    model = decoder(bf16_model)
    args = model.args
    embedding = model.model.embed_tokens.weight
    cos, sin = model.rotary.cos_sin(torch.arange(64), torch.bfloat16)

    def call(
        token: int, position: int, slot: int, table: list[int], *, counts: Any = None, kinds: Any = None
    ) -> torch.Tensor:
        return torch.ops.mooncake_avx512.decode_layers(
            torch.tensor([token]), torch.tensor([position]), embedding, cos, sin, torch.tensor([slot]),
            torch.tensor([table], dtype=torch.int32), fused.k_caches, fused.v_caches, fused.norms,
            fused.weights, fused.dms, kinds or fused.kinds, counts or fused.counts,
            args.num_heads, args.num_kv_heads, 1e-5, 0.125, fused.kernel.amx, 2,
        )  # fmt: skip

    assert call(1, 0, 0, [0]).shape == (1, args.hidden_size)
    with pytest.raises(RuntimeError, match="token id out of the vocabulary"):
        call(args.vocab_size, 0, 0, [0])
    with pytest.raises(RuntimeError, match="position past the rotary table"):
        call(1, 64, 0, [0, 0, 0, 0, 0])
    with pytest.raises(RuntimeError, match="slot out of the cache"):
        call(1, 0, blocks * block_size, [0])
    with pytest.raises(RuntimeError, match="block table entry out of the cache"):
        call(1, 0, 0, [blocks])
    with pytest.raises(RuntimeError, match="context longer than its table"):
        call(1, block_size, 0, [0])
    with pytest.raises(RuntimeError, match="four projections per layer"):
        call(1, 0, 0, [0], counts=fused.counts[:-1])
    with pytest.raises(RuntimeError, match="must be a multiple of 256"):  # Q4_1 levels named a Q6_K matrix
        call(1, 0, 0, [0], kinds=[14, *fused.kinds[1:]])


@pytest.mark.slow
def test_its_rows_are_batch_invariant_so_bf16_speculation_changes_no_token(bf16_model: LoadedModel) -> None:
    """Each row's sums run in the same order whatever the step holds (the Q4 kernel accumulates every
    weight row against every activation row alike; attention is per row), so verifying drafts as extra rows
    gives the very tokens that one-row decode steps give, in bf16 too."""
    tokenizer = bf16_model.tokenizer
    prompts = [
        chat_ids(tokenizer, "Repeat this text exactly: The committee met on Monday to discuss the budget."),
        list(tokenizer.encode("red green blue red green blue red green blue red green blue")),
    ]
    params = SamplingParams(temperature=0, max_tokens=40)
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    outputs = {}
    for name, extra in (("plain", {}), ("speculative", {"speculative": spec})):
        engine = make_engine(bf16_model, dtype="bfloat16", max_num_seqs=2, **extra)
        assert runner_of(engine).fused_decode is not None
        outputs[name] = [out.outputs[0].token_ids for out in engine.generate(prompts, params)]
        if extra:
            assert engine.stats().spec_decode_num_accepted_tokens > 10
    assert outputs["speculative"] == outputs["plain"]


def test_a_repeated_request_gets_the_same_answer_whatever_the_prefix_cache_held(
    bf16_model: LoadedModel,
) -> None:
    """The second run finds the prompt's first blocks cached and computes only a short tail: that tail
    takes the packed path as the whole prompt did (neither the native stack nor the Q4 kernel), and its
    attention rows come out as the whole prompt's did (test_prompt_attention.py)."""
    prompt = chat_ids(bf16_model.tokenizer, "Name three colours of the rainbow.")
    assert len(prompt) > 16 and len(prompt) % 16 != 0  # a cached block, then a tail of at most 16 tokens
    engine = make_engine(bf16_model, dtype="bfloat16", max_num_seqs=1)
    params = SamplingParams(temperature=0, max_tokens=48)
    first, second = (engine.generate([prompt], params)[0].outputs[0].token_ids for _ in range(2))
    assert engine.stats().prefix_cache_hits > 0
    assert second == first


def user_ids(tokenizer: Any, question: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True
    )
    return [int(t) for t in (ids if isinstance(ids, list) else ids["input_ids"])]


def arrivals(engine: LLMEngine, prompt: list[int], waves: list[tuple[int, int]], max_tokens: int) -> set[Any]:
    """Every distinct answer when `count` copies of prompt arrive, then `steps` steps run, wave by wave."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    answers: set[tuple[int, ...]] = set()
    for count, steps in waves:
        for _ in range(count):
            engine.add_request(None, prompt, params)
        for _ in range(steps):
            answers.update(tuple(o.outputs[0].token_ids) for o in engine.step() if o.finished)
    while engine.has_unfinished_requests():
        answers.update(tuple(o.outputs[0].token_ids) for o in engine.step() if o.finished)
    return answers


@pytest.fixture(scope="module", params=[False, True], ids=["registers", "tiles"])
def either_q4_path(request: pytest.FixtureRequest, test_cache_dir: Path) -> LoadedModel:
    """The bf16 model with its Q4 kernel on registers (the default) or on AMX tiles (q4_amx), each at every
    row count."""
    amx = bool(request.param)
    if amx and not cpu_has_amx():
        pytest.skip("this CPU has no AMX: only the register path runs here (the default on every CPU)")
    loaded = load_model(
        "default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir, gguf_amx_decode=amx
    )
    return loaded


@pytest.mark.slow
@pytest.mark.parametrize(
    ("question", "max_tokens"), [("Name three colors.", 4), ("Write a haiku about the sea.", 24)]
)
def test_identical_greedy_requests_get_one_answer_however_they_arrive(
    either_q4_path: LoadedModel, question: str, max_tokens: int
) -> None:
    """Copies of one prompt arriving together over a cached prefix (each computes a short tail), a copy
    decoding in steps that carry the others' prompts, and more decodes than one native call takes: the
    colours prompt's first token and the haiku's 18th sat on near-ties that those steps used to flip.
    Under the step-latency target the prompts are cut as measured step times allow: the answer must not
    depend on that either."""
    engine = make_engine(either_q4_path, dtype="bfloat16", max_num_seqs=32)
    assert runner_of(engine).fused_decode is not None
    prompt = user_ids(either_q4_path.tokenizer, question)
    [alone] = arrivals(engine, prompt, [(1, 0)], max_tokens)
    for waves in ([(8, 0)], [(1, 1), (7, 0)], [(1, 2), (20, 0)], [(2, 1), (3, 1), (3, 0)]):
        assert arrivals(engine, prompt, waves, max_tokens) == {alone}, waves
