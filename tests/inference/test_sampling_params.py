"""Every numeric sampling parameter has a range the engine's tensors can hold: at its edges it is accepted
and runs through the sampler; just past them, or as NaN, infinity or the wrong type, it is refused."""

import math

import pytest
import torch

from inference.core.sampler import Sampler
from inference.core.sequence import Sequence
from inference.sampling_params import (
    MAX_INT32,
    MAX_LOGIT_BIAS,
    MAX_LOGPROBS,
    MAX_N,
    MAX_REPETITION_PENALTY,
    MAX_STOP_TOKEN_IDS,
    MAX_TEMPERATURE,
    MIN_REPETITION_PENALTY,
    SEED_RANGE,
    SamplingParams,
)

NAN, INF = math.nan, math.inf

# (parameter, accepted edge values, refused values)
CASES = [
    ("n", [1, MAX_N], [0, MAX_N + 1, 1.0, True, None]),
    ("temperature", [0.0, MAX_TEMPERATURE, 0], [-1e-9, MAX_TEMPERATURE * 1.01, NAN, INF, "1"]),
    ("top_p", [1e-9, 1.0], [0.0, 1.0000001, NAN, -INF]),
    ("top_k", [-1, 0, 1, MAX_INT32], [-2, MAX_INT32 + 1, 2**63, 1e30, 5.0, NAN]),
    ("min_p", [0.0, 1.0], [-0.1, 1.1, NAN]),
    ("presence_penalty", [-2.0, 2.0], [-2.01, 2.01, NAN, INF]),
    ("frequency_penalty", [-2.0, 2.0], [-2.01, 2.01, NAN, -INF]),
    (
        "repetition_penalty",
        [MIN_REPETITION_PENALTY, 1.0, MAX_REPETITION_PENALTY],
        [0.0, MIN_REPETITION_PENALTY / 2, MAX_REPETITION_PENALTY + 1, NAN, INF],
    ),
    ("seed", [SEED_RANGE[0], 0, SEED_RANGE[1]], [SEED_RANGE[0] - 1, SEED_RANGE[1] + 1, 1.5]),
    ("max_tokens", [1, MAX_INT32, None], [0, MAX_INT32 + 1, 2.0]),
    ("min_tokens", [0, 16], [-1, MAX_INT32 + 1, 0.5]),
    ("logprobs", [None, 0, MAX_LOGPROBS], [-1, MAX_LOGPROBS + 1, 1.0]),
    ("prompt_logprobs", [None, 0, MAX_LOGPROBS], [-1, MAX_LOGPROBS + 1]),
    (
        "logit_bias",
        [{0: -100.0, MAX_INT32: 100.0}, {i: 1.0 for i in range(MAX_LOGIT_BIAS)}],
        [
            {-1: 1.0},
            {MAX_INT32 + 1: 1.0},
            {1: 100.5},
            {1: NAN},
            {"1": 1.0},
            {i: 1.0 for i in range(MAX_LOGIT_BIAS + 1)},
        ],
    ),
    (
        "stop_token_ids",
        [[0, MAX_INT32], list(range(MAX_STOP_TOKEN_IDS))],
        [[-1], [MAX_INT32 + 1], list(range(MAX_STOP_TOKEN_IDS + 1)), [1.0]],
    ),
]

VOCAB = 50


def sample_once(params: SamplingParams) -> int:
    """Run the params through the sampler, as a batch row next to a plain one."""
    sampler = Sampler(eos_token_ids={VOCAB - 1})
    seqs = [
        Sequence("a", [1, 2, 3], params, max_tokens=4, arrival_time=0.0, priority=0),
        Sequence("b", [4, 5], SamplingParams(), max_tokens=4, arrival_time=0.0, priority=0),
    ]
    token_ids = sampler(torch.randn(2, VOCAB), seqs).token_ids
    assert all(0 <= t < VOCAB for t in token_ids)
    return token_ids[0]


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, ok, _ in CASES for v in ok])
def test_edge_values_are_accepted_and_sample(name, value):
    extra = {"max_tokens": 16} if name == "min_tokens" else {}
    sample_once(SamplingParams(**{name: value}, **extra))


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, _, bad in CASES for v in bad])
def test_values_past_the_edges_are_refused(name, value):
    with pytest.raises(ValueError, match=name.split("_")[0]):
        SamplingParams(**{name: value})


def test_min_tokens_may_not_exceed_max_tokens():
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(min_tokens=5, max_tokens=4)


def test_stop_strings_are_capped_in_number_and_length():
    from inference.sampling_params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS

    SamplingParams(stop=["x" * MAX_STOP_STRING_CHARS] * MAX_STOP_STRINGS)
    with pytest.raises(ValueError, match="at most"):
        SamplingParams(stop=["x" * (MAX_STOP_STRING_CHARS + 1)])
    with pytest.raises(ValueError, match="at most"):
        SamplingParams(stop=["x" * 500_000])
    with pytest.raises(ValueError, match="at most"):
        SamplingParams(stop=[str(i) for i in range(MAX_STOP_STRINGS + 1)])
