import torch

from inference.core.sampler import Sampler
from inference.core.sequence import Sequence
from inference.sampling_params import SamplingParams


def seq(params, tokens=(1, 2, 3), output=()):
    s = Sequence("r", list(tokens), params, max_tokens=16, arrival_time=0.0)
    s.token_ids += list(output)
    return s


def logits(rows=1, vocab=50, seed=0):
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))


def test_greedy_is_exact_argmax_and_logprobs_are_log_softmax():
    x = logits(3)
    result = Sampler(eos_token_ids={0})(x, [seq(SamplingParams(temperature=0, logprobs=5)) for _ in range(3)])
    assert result.token_ids == x.argmax(-1).tolist()
    ref = torch.log_softmax(x, -1)
    chosen, top = result.logprobs[0]
    assert abs(chosen - ref[0].max().item()) < 1e-6 and len(top) == 5
    assert [t for t, _ in top] == ref[0].topk(5).indices.tolist()


def test_greedy_ties_go_to_the_lowest_token_id_like_argmax():
    # bf16 logits tie often; HF's greedy (argmax) takes the first maximum, and so must we.
    x = torch.zeros(2, 4096)
    x[0, [9, 700, 4000]] = 3.0
    x[1, [4095, 2]] = 1.5
    params = SamplingParams(temperature=0)
    assert Sampler(eos_token_ids=set())(x, [seq(params), seq(params)]).token_ids == [9, 2]


def test_logit_bias_forces_a_token():
    result = Sampler(eos_token_ids=set())(logits(), [seq(SamplingParams(temperature=0, logit_bias={7: 100}))])
    assert result.token_ids == [7]


def test_logit_bias_tensors_are_built_once_per_request():
    root = seq(SamplingParams(logit_bias={3: 5.0, 7: -100.0}))
    ids, values = root.logit_bias
    assert ids.tolist() == [3, 7] and values.tolist() == [5.0, -100.0]
    assert root.fork(1).logit_bias[0] is ids  # n > 1 siblings share the root's tensors
    assert seq(SamplingParams()).logit_bias is None


def test_min_tokens_masks_eos_and_stop_ids():
    x = logits()
    x[0, 0] = 50.0
    x[0, 5] = 40.0
    params = SamplingParams(temperature=0, min_tokens=2, stop_token_ids=[5])
    assert Sampler(eos_token_ids={0})(x, [seq(params)]).token_ids[0] not in (0, 5)
    assert Sampler(eos_token_ids={0})(x, [seq(params, output=(9, 9))]).token_ids == [0]


def test_penalties_push_away_repeated_tokens():
    x = torch.zeros(1, 10)
    x[0, 4] = 1.0
    x[0, 5] = 0.9
    for params in (
        SamplingParams(temperature=0, repetition_penalty=2.0),
        SamplingParams(temperature=0, presence_penalty=1.0),
        SamplingParams(temperature=0, frequency_penalty=0.5),
    ):
        assert Sampler(eos_token_ids=set())(x, [seq(params, tokens=(1,), output=(4,))]).token_ids == [5]


def test_top_k_top_p_min_p_restrict_the_support():
    x = torch.tensor([[5.0, 4.0, 3.0, -10.0, -10.0]])
    sampler = Sampler(eos_token_ids=set(), seed=1)
    for params, allowed in (
        (SamplingParams(top_k=1), {0}),
        (SamplingParams(top_p=0.5), {0}),
        (SamplingParams(top_k=2), {0, 1}),
        (SamplingParams(min_p=0.3), {0, 1}),
    ):
        picks = {sampler(x, [seq(params)]).token_ids[0] for _ in range(40)}
        assert picks <= allowed


def test_seeded_sampling_is_reproducible_and_batch_independent():
    x = logits(4, vocab=200, seed=3)
    params = SamplingParams(temperature=1.0, seed=1234)

    def draw(batch_rows, sampler_seed):
        seqs = [seq(SamplingParams(temperature=1.0)) for _ in range(batch_rows)] + [seq(params)]
        rows = torch.cat([x[:batch_rows], x[3:4]])
        return Sampler(eos_token_ids=set(), seed=sampler_seed)(rows, seqs).token_ids[-1]

    s1, s2 = seq(params), seq(params)
    assert [Sampler(eos_token_ids=set())(x[3:4], [s1]).token_ids[0] for _ in range(5)] == [
        Sampler(eos_token_ids=set(), seed=99)(x[3:4], [s2]).token_ids[0] for _ in range(5)
    ]
    assert draw(0, 0) == draw(3, 7) == draw(1, 11)


def test_logits_processors_mask_per_sequence():
    def only_9(token_ids, row):
        masked = torch.full_like(row, float("-inf"))
        masked[9] = 0.0
        return masked

    x = logits(2)
    result = Sampler(eos_token_ids=set())(
        x, [seq(SamplingParams(logits_processors=[only_9])), seq(SamplingParams(temperature=0))]
    )
    assert result.token_ids == [9, int(x[1].argmax())]


def test_the_callers_logits_are_never_modified():
    """Rows that need processing work on a copy; a batch that needs none is read as it is."""
    x = logits(3)
    before = x.clone()
    mixed = [
        seq(SamplingParams(temperature=0, logit_bias={7: 100})),
        seq(SamplingParams(temperature=0, repetition_penalty=1.5), output=(4, 4)),
        seq(SamplingParams(temperature=0)),
    ]
    assert Sampler(eos_token_ids={0})(x, mixed).token_ids[0] == 7
    assert torch.equal(x, before)
    plain = [seq(SamplingParams(temperature=0)) for _ in range(3)]
    assert Sampler(eos_token_ids={0})(x, plain).token_ids == x.argmax(-1).tolist()
    assert torch.equal(x, before)


def test_min_tokens_yields_to_a_processor_that_allows_only_ending():
    # A completed grammar masks everything but EOS: min_tokens must not leave a row with nothing allowed.
    def only_eos(token_ids, row):
        out = torch.full_like(row, float("-inf"))
        out[7] = row[7]
        return out

    for temperature in (0.0, 1.0):
        params = SamplingParams(temperature=temperature, min_tokens=4, logits_processors=[only_eos])
        assert Sampler(eos_token_ids={7})(logits(), [seq(params)]).token_ids == [7]

    # With anything else allowed, the ban holds as before.
    def eos_or_nine(token_ids, row):
        out = torch.full_like(row, float("-inf"))
        out[[7, 9]] = row[[7, 9]]
        return out

    x = logits()
    x[0, 7] = 50.0
    params = SamplingParams(temperature=0, min_tokens=4, logits_processors=[eos_or_nine])
    assert Sampler(eos_token_ids={7})(x, [seq(params)]).token_ids == [9]
