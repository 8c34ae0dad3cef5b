"""n-gram speculative decoding: the proposer, the verification's exactness and distribution, the setting,
and the engine on the real model in fp32 (output identical with and without drafts, in fewer steps)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from inference import EngineConfig, SamplingParams
from inference.core.block_manager import BlockManager
from inference.core.ngram_proposer import propose_ngram
from inference.core.rejection_sampler import accept_prefix, verify_greedy
from inference.core.sampler import Sampler
from inference.core.sequence import Sequence
from inference.core.speculative import Drafter, can_draft
from inference.speculative_config import SpeculativeConfig
from tests.inference.real_model import chat_ids, make_engine

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def _seq(tokens: list[int], params: SamplingParams | None = None, *, prompt_len: int = 1) -> Sequence:
    seq = Sequence("r", tokens[:prompt_len], params or SamplingParams(), max_tokens=1000, arrival_time=0.0)
    seq.token_ids = list(tokens)
    return seq


# ---- proposer -------------------------------------------------------------------------------------
def test_proposer_drafts_what_followed_the_match():
    assert propose_ngram([1, 2, 3, 4, 5, 9, 2, 3], k=2, n_min=1, n_max=3) == [4, 5]


def test_proposer_longest_ngram_wins_over_a_more_recent_shorter_one():
    # "2 3" recurs most recently before 7; the 3-gram "1 2 3" only before 4.
    tokens = [1, 2, 3, 4, 5, 2, 3, 7, 1, 2, 3]
    assert propose_ngram(tokens, k=2, n_min=1, n_max=3) == [4, 5]
    assert propose_ngram(tokens, k=2, n_min=1, n_max=2) == [7, 1]


def test_proposer_takes_the_most_recent_occurrence():
    assert propose_ngram([5, 6, 1, 5, 6, 2, 5, 6], k=1, n_min=2, n_max=2) == [2]


def test_proposer_without_a_match_drafts_nothing():
    assert propose_ngram([1, 2, 3, 4], k=3, n_min=1, n_max=3) == []
    assert propose_ngram([1, 2, 9, 2], k=3, n_min=2, n_max=3) == []  # only a 1-gram matches
    assert propose_ngram([7], k=3, n_min=1, n_max=3) == []
    assert propose_ngram([1, 2, 1, 2], k=0, n_min=1, n_max=2) == []


def test_proposer_copies_overlapping_runs_up_to_k():
    assert propose_ngram([8, 8, 8], k=4, n_min=1, n_max=2) == [8, 8, 8, 8]
    assert propose_ngram([1, 2, 3, 1, 2, 3, 1], k=5, n_min=2, n_max=4) == [2, 3, 1, 2, 3]
    assert propose_ngram(np.array([1, 2, 3, 1, 2]), k=2, n_min=2, n_max=2) == [3, 1]


def test_drafter_respects_max_tokens_max_model_len_and_the_limit():
    drafter = Drafter(SpeculativeConfig(num_speculative_tokens=4, prompt_lookup_min=1), max_model_len=100)
    tokens = [1, 2, 3, 4, 5, 6, 1, 2]
    seq = _seq(tokens, prompt_len=6)
    assert drafter.draft(seq, limit=10) == [3, 4, 5, 6]
    assert drafter.draft(seq, limit=2) == [3, 4]
    seq.max_tokens = 4  # 2 output tokens so far: this step may emit 2 more, so 1 draft
    assert drafter.draft(seq, limit=10) == [3]
    seq.max_tokens = 1000
    drafter.max_model_len = len(tokens) + 3
    assert drafter.draft(seq, limit=10) == [3, 4]


def test_requests_whose_processing_depends_on_new_tokens_do_not_draft():
    assert can_draft(_seq([1, 2], SamplingParams(logprobs=2, logit_bias={1: 2.0}, seed=3)))
    assert not can_draft(_seq([1, 2], SamplingParams(presence_penalty=0.5)))
    assert not can_draft(_seq([1, 2], SamplingParams(repetition_penalty=1.2)))
    assert not can_draft(_seq([1, 2], SamplingParams(min_tokens=3)))
    assert not can_draft(_seq([1, 2], SamplingParams(logits_processors=[lambda ids, row: row])))


# ---- verification ---------------------------------------------------------------------------------
def test_accept_prefix_stops_at_the_first_mismatch_and_adds_the_bonus():
    assert accept_prefix(lambda j: [4, 5, 6, 7][j], [4, 5, 6]) == [4, 5, 6, 7]
    assert accept_prefix(lambda j: [4, 9, 6, 7][j], [4, 5, 6]) == [4, 9]
    assert accept_prefix(lambda j: [1, 2][j], []) == [1]


def test_greedy_verification_is_argmax_position_by_position():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 2.0, 0.0], [0.0, 0.0, 5.0]])
    assert verify_greedy(logits, [1, 0]) == [1, 0, 2]  # tie: the first index, as the sampler's argmax
    assert verify_greedy(logits, [2, 0]) == [1]


P0 = torch.tensor([0.1, 0.35, 0.2, 0.3, 0.05])
P1 = torch.tensor([0.4, 0.1, 0.1, 0.25, 0.15])
DRAFT_TOKEN = 3
NUM_SAMPLES = 20_000
CHI2_P_MIN = 1e-4  # strict: a correct sampler fails this about once in 10,000 runs (and it is seeded)


def _sampled_verify(sampler: Sampler, seq: Sequence) -> list[int]:
    return sampler.verify(torch.stack([P0, P1]).log(), seq, [DRAFT_TOKEN]).token_ids


def _accept_always(sampler: Sampler, seq: Sequence) -> list[int]:
    bonus = int(torch.multinomial(P1, 1, generator=sampler._generator))
    return [DRAFT_TOKEN, bonus]


def _resample_from_p_on_reject(sampler: Sampler, seq: Sequence) -> list[int]:
    """Accepts with probability p(t) but then samples from p instead of the residual: biased towards t."""
    if float(torch.rand(1, generator=sampler._generator)) < P0[DRAFT_TOKEN]:
        return [DRAFT_TOKEN, int(torch.multinomial(P1, 1, generator=sampler._generator))]
    return [int(torch.multinomial(P0, 1, generator=sampler._generator))]


def _chi_square_p(counts: np.ndarray, probs: torch.Tensor) -> float:
    """Pearson's goodness-of-fit p-value: the chi-square survival function is the upper regularised gamma."""
    expected = probs.double() * int(counts.sum())
    statistic = float(((torch.from_numpy(counts).double() - expected) ** 2 / expected).sum())
    df = len(counts) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2), torch.tensor(statistic / 2)))


def _emitted_distribution_fits(verify: Any) -> bool:
    sampler = Sampler(eos_token_ids=set(), seed=1234)
    seq = _seq([0], SamplingParams(temperature=1.0))
    firsts, bonuses = [], []
    for _ in range(NUM_SAMPLES):
        tokens = verify(sampler, seq)
        firsts.append(tokens[0])
        if len(tokens) == 2:
            bonuses.append(tokens[1])
    first_counts = np.bincount(firsts, minlength=5)
    bonus_counts = np.bincount(bonuses, minlength=5)
    first_p = _chi_square_p(first_counts, P0)
    bonus_p = _chi_square_p(bonus_counts, P1)
    return bool(first_p > CHI2_P_MIN and bonus_p > CHI2_P_MIN)


def test_sampled_verification_keeps_the_target_distribution():
    """The first emitted token (accepted draft or residual sample) ~ p0, the bonus after it ~ p1."""
    assert _emitted_distribution_fits(_sampled_verify)


@pytest.mark.parametrize("wrong", [_accept_always, _resample_from_p_on_reject])
def test_the_distribution_check_catches_a_wrong_verifier(wrong):
    assert not _emitted_distribution_fits(wrong)


def test_a_seeded_request_emits_what_it_would_without_a_draft():
    """One noise row per emitted token, as the plain sampler draws: the same seed, the same tokens."""
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 2
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=42)
    plain_seq, spec_seq = _seq([0], params), _seq([0], params)
    sampler = Sampler(eos_token_ids=set())
    plain = [sampler(logits[j : j + 1], [plain_seq]).token_ids[0] for j in range(3)]
    draft = [*plain[:2], (plain[2] + 1) % 50]  # two accepted, then a rejection
    assert sampler.verify(logits, spec_seq, draft).token_ids == plain[:3]
    # The generators advanced alike: the next draw agrees too.
    assert sampler(logits[3:4], [plain_seq]).token_ids == sampler(logits[3:4], [spec_seq]).token_ids


def test_verification_logprobs_are_the_plain_samplers():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(1))
    seq = _seq([0], SamplingParams(temperature=0, logprobs=2))
    sampler = Sampler(eos_token_ids=set())
    result = sampler.verify(logits, seq, [int(logits[0].argmax()), int(logits[1].argmax())])
    assert len(result.token_ids) == 3
    for j, lps in enumerate(result.logprobs):
        plain = sampler(logits[j : j + 1], [seq])
        assert plain.token_ids[0] == result.token_ids[j] and plain.logprobs[0] == lps


# ---- KV blocks ------------------------------------------------------------------------------------
def test_trim_frees_blocks_reserved_for_rejected_drafts_only():
    bm = BlockManager(8, 4)
    seq = _seq(list(range(6)), prompt_len=6)
    bm.allocate(seq, [], 6)
    seq.num_computed_tokens = 5
    bm.append(seq, 6)  # the last token + 5 drafts: positions up to 10, three blocks
    assert len(seq.block_table) == 3 and bm.num_free_blocks == 5
    seq.num_computed_tokens = 6
    bm.trim(seq, 7)
    assert len(seq.block_table) == 2 and bm.num_free_blocks == 6
    bm.trim(seq, 1)  # never below the computed tokens
    assert len(seq.block_table) == 2


# ---- the setting ----------------------------------------------------------------------------------
def test_yaml_mapping_becomes_the_setting():
    config = EngineConfig.from_dict({"speculative": {"method": "ngram", "num_speculative_tokens": "3"}})
    assert config.speculative == SpeculativeConfig("ngram", 3, 4, 2)
    assert str(config.speculative) == "ngram: 3 tokens from 2..4-gram matches"
    assert EngineConfig.from_dict(
        {"speculative": {"method": "ngram", "prompt_lookup_max": 1}}
    ).speculative == (SpeculativeConfig("ngram", 4, 1, 1))
    assert EngineConfig().speculative is None
    assert EngineConfig.from_dict({"speculative": None}).speculative is None
    assert EngineConfig(speculative={"method": "ngram"}).speculative == SpeculativeConfig()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"method": "eagle"}, "speculative.method must be one of"),
        ({"num_speculative_tokens": 3}, "speculative.method is required"),
        ({"method": "ngram", "num_speculative_tokens": 0}, r"num_speculative_tokens must be in \[1, 16\]"),
        ({"method": "ngram", "num_speculative_tokens": 2.5}, "must be an integer"),
        ({"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 3}, "prompt_lookup_min"),
        ({"method": "ngram", "lookahead": 3}, "unknown speculative setting"),
        ("ngram", "speculative must be a mapping"),
    ],
)
def test_invalid_settings_are_refused_naming_the_key(value, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig.from_dict({"speculative": value})


def test_speculation_is_for_the_native_engine_only():
    with pytest.raises(ValueError, match="native"):
        EngineConfig(engine_type="transformers", speculative={"method": "ngram"})


# ---- the engine on the real model -----------------------------------------------------------------
REPEAT_TEXT = (
    "The committee met on Monday to discuss the new budget. The committee agreed that the budget for "
    "schools should grow by ten percent."
)


def _prompts(tokenizer: Any) -> list[list[int]]:
    return [
        chat_ids(tokenizer, "Summarize this text: " + REPEAT_TEXT),
        list(tokenizer.encode("red green blue red green blue red green blue red green blue")),
        list(tokenizer.encode("The capital of France is")),
        chat_ids(tokenizer, "Why is the sky blue?"),
    ]


def _run(loaded: Any, prompts: list[list[int]], params: Any, **config: Any) -> tuple[list[Any], int, Any]:
    engine = make_engine(loaded, **config)
    plist = params if isinstance(params, list) else [params] * len(prompts)
    ids = [engine.add_request(None, p, sp) for p, sp in zip(prompts, plist, strict=True)]
    final: dict[str, Any] = {}
    steps = 0
    while engine.has_unfinished_requests():
        steps += 1
        final.update((out.request_id, out) for out in engine.step() if out.finished)
    assert engine.scheduler.block_manager.num_used_blocks == 0
    return [final[i] for i in ids], steps, engine.stats()


def _completions(outputs: list[Any]) -> list[list[tuple[list[int], str, Any]]]:
    return [[(c.token_ids, c.text, c.finish_reason) for c in out.outputs] for out in outputs]


GREEDY = SamplingParams(temperature=0, max_tokens=40)


@pytest.mark.slow
def test_greedy_output_is_identical_in_fewer_steps(default_loaded):
    prompts = _prompts(default_loaded.tokenizer)
    plain, _, _ = _run(default_loaded, prompts, GREEDY)
    spec, _, stats = _run(default_loaded, prompts, GREEDY, speculative=SPEC)
    assert _completions(spec) == _completions(plain)
    assert stats.spec_decode_num_accepted_tokens > 10
    assert stats.spec_decode_acceptance_rate is not None and 0 < stats.spec_decode_acceptance_rate <= 1
    assert stats.spec_decode_num_drafts <= stats.spec_decode_num_draft_tokens
    # A batch takes as many steps as its longest non-repetitive reply: count on the repetitive ones alone.
    _, plain_steps, _ = _run(default_loaded, prompts[:2], GREEDY)
    _, spec_steps, _ = _run(default_loaded, prompts[:2], GREEDY, speculative=SPEC)
    assert spec_steps < plain_steps * 0.6


@pytest.mark.slow
def test_identical_with_logprobs_stops_n_and_seeds(default_loaded):
    prompts = _prompts(default_loaded.tokenizer)
    params = [
        SamplingParams(temperature=0, max_tokens=40, logprobs=3),
        SamplingParams(temperature=0, max_tokens=40, stop=["green green green"]),
        SamplingParams(temperature=0.8, top_p=0.9, max_tokens=30, seed=11, n=2),
        SamplingParams(temperature=1.0, top_k=20, max_tokens=30, seed=5, presence_penalty=0.3),
    ]
    plain, _, _ = _run(default_loaded, prompts, params)
    spec, _, stats = _run(default_loaded, prompts, params, speculative=SPEC)
    assert _completions(spec) == _completions(plain)
    assert plain[1].outputs[0].finish_reason == "stop"
    for ours, theirs in zip(spec[0].outputs[0].logprobs, plain[0].outputs[0].logprobs, strict=True):
        assert ours[0].token_id == theirs[0].token_id and abs(ours[0].logprob - theirs[0].logprob) < 1e-4
    assert stats.spec_decode_num_accepted_tokens > 0


@pytest.mark.slow
def test_identical_with_a_prefix_cache_hit_and_chunked_prefill(default_loaded):
    prompts = _prompts(default_loaded.tokenizer)
    plain, _, _ = _run(default_loaded, prompts, GREEDY, enable_prefix_caching=False)
    engine_config = {"speculative": SPEC, "max_num_batched_tokens": 24, "max_num_seqs": 4}
    engine = make_engine(default_loaded, **engine_config)
    engine.generate([prompts[0]], GREEDY)  # its blocks (prompt and verified output) stay cached
    outputs = engine.generate([*prompts, prompts[0]], GREEDY)
    assert _completions(outputs) == _completions([*plain, plain[0]])
    stats = engine.stats()
    assert stats.prefix_cache_hits >= 32 and stats.spec_decode_num_accepted_tokens > 0


@pytest.mark.slow
def test_identical_under_forced_preemption(default_loaded):
    prompts = _prompts(default_loaded.tokenizer)
    plain, _, _ = _run(default_loaded, prompts, GREEDY)
    longest = max(len(p) for p in prompts) + GREEDY.max_tokens
    per_token = 30 * 2 * 3 * 64 * 4  # layers * (k, v) * kv heads * head dim * fp32
    tiny = {"max_model_len": longest, "kv_cache_memory_bytes": per_token * (longest + 40)}
    spec, _, stats = _run(default_loaded, prompts, GREEDY, speculative=SPEC, **tiny)
    assert _completions(spec) == _completions(plain)
    assert stats.num_preemptions > 0 and stats.spec_decode_num_accepted_tokens > 0
