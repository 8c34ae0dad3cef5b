"""Verifying an n-gram draft against the target model's distributions from one forward pass.

An n-gram draft is a point mass: q(x) = 1 at the draft token t. Speculative sampling then accepts t with
probability min(1, p(t) / q(t)) = p(t), and on rejection samples from normalize(max(p - q, 0)), which is p
with t removed. Drawing x ~ p and accepting when x == t does exactly that: P(accept) = p(t), and a
rejected draw is x ~ p conditioned on x != t, the residual. We sample that way because each emitted token
then costs one draw from p, as it does without speculation, so a seeded request draws the same noise for
the same output position either way (its output does not depend on how much was drafted). Greedy is the
same rule with x = argmax p. After k accepted drafts the last position's x is the bonus token.

Positions are verified left to right and stop at the first x != t (that x is emitted as the correction):
the distributions at later positions were computed on a prefix that is now wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

# The same floor the sampler's exponential race uses, so the two agree draw for draw.
_MIN_NOISE = 1e-10


def accept_prefix(choose: Callable[[int], int], draft: Sequence[int]) -> list[int]:
    """Tokens to emit: choose(j) is the target's token at draft position j (j = len(draft): the bonus)."""
    emitted: list[int] = []
    for j in range(len(draft) + 1):
        token = choose(j)
        emitted.append(token)
        if j == len(draft) or token != draft[j]:
            break
    return emitted


def verify_greedy(logits: torch.Tensor, draft: Sequence[int]) -> list[int]:
    """logits: [len(draft) + 1, vocab] processed logits; argmax with the sampler's first-index tie rule."""
    chosen = logits.max(dim=-1).indices.tolist()
    return accept_prefix(lambda j: int(chosen[j]), draft)


def verify_sampled(
    probs: torch.Tensor, draft: Sequence[int], generator: torch.Generator | None, shared: torch.Generator
) -> list[int]:
    """probs: [len(draft) + 1, vocab] target distributions (after temperature and truncation).

    A request's own generator draws one noise row per emitted token, in order, exactly as the plain
    sampler does; without one, the shared generator draws every row at once (its stream is the batch's
    anyway, so nothing depends on how much of it is used).
    """
    if generator is None:
        noise = torch.empty(probs.shape).exponential_(generator=shared).clamp_min_(_MIN_NOISE)
        chosen = (probs / noise.to(probs.device)).max(dim=-1).indices.tolist()
        return accept_prefix(lambda j: int(chosen[j]), draft)

    def draw(j: int) -> int:
        row = torch.empty(probs.shape[1]).exponential_(generator=generator).clamp_min_(_MIN_NOISE)
        return int((probs[j] / row.to(probs.device)).max(dim=-1).indices)

    return accept_prefix(draw, draft)
