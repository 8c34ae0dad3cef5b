"""The scoring arithmetic of bench/perplexity.py, pure so a test can pin it: the same windows and the same
scored tokens as llama.cpp's `llama-perplexity`, so our perplexity and its are of the same tokens.

llama-perplexity (tools/perplexity/perplexity.cpp, `perplexity()`) cuts the token stream into
floor(n / ctx) windows of `ctx` tokens that do not overlap (the stride is the context), evaluates each
window from an empty cache, and scores only its second half: the logits at positions ctx/2 .. ctx-2
predict tokens ctx/2+1 .. ctx-1 of the window. Every scored token thus sees at least ctx/2 tokens of
context, and the first half of each window is only context. Its result line is exp(mean NLL) with the
error exp(mean) * sqrt(var / (count - 1)); `summarize` computes both the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Perplexity:
    ppl: float
    error: float  # llama-perplexity's "+/-": the standard error of the mean NLL, carried through exp
    count: int  # tokens scored


def windows(num_tokens: int, ctx: int) -> list[tuple[int, int]]:
    """(start, end) of each window: whole windows of `ctx` tokens, stride `ctx`, the tail dropped."""
    if ctx < 4 or ctx % 2:
        raise ValueError(f"the context must be an even number of at least 4 tokens, got {ctx}")
    if num_tokens < 2 * ctx:
        # llama-perplexity refuses the same: it needs two windows.
        raise ValueError(f"{num_tokens} tokens are fewer than two windows of {ctx}")
    return [(i * ctx, (i + 1) * ctx) for i in range(num_tokens // ctx)]


def scored_positions(ctx: int) -> range:
    """The positions, within a window, of the tokens scored: the second half bar its first token."""
    return range(ctx // 2 + 1, ctx)


def window_nlls(token_logprobs: Sequence[float], ctx: int) -> list[float]:
    """Negative log-likelihoods of one window's scored tokens; token_logprobs[i] is log p(token i | tokens
    before it) for the window's positions 0..ctx-1 (position 0, which has no context, is never read)."""
    if len(token_logprobs) != ctx:
        raise ValueError(f"a window has {ctx} positions, got {len(token_logprobs)} logprobs")
    return [-float(token_logprobs[i]) for i in scored_positions(ctx)]


def summarize(nlls: Sequence[float]) -> Perplexity:
    count = len(nlls)
    if count < 2:
        raise ValueError("perplexity needs at least two scored tokens")
    mean = math.fsum(nlls) / count
    var = math.fsum(x * x for x in nlls) / count - mean * mean
    ppl = math.exp(mean)
    return Perplexity(ppl, ppl * math.sqrt(max(var, 0.0) / (count - 1)), count)


def distance(value: float, reference: float) -> float:
    return abs(value - reference)
