"""Reciprocal rank fusion: one ranking from several (Cormack, Clarke and Büttcher, SIGIR 2009).

Each item scores the sum over the rankings that hold it of 1 / (k + rank), rank counted from 1. Only
ranks matter, so a full-text score (BM25, ts_rank) and a cosine need no common scale; an item both
rankings place well beats one that only one ranks first.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

K = 60  # the paper's constant: it damps the weight of the very first ranks


def reciprocal_rank_fusion(rankings: Sequence[Sequence[T]], *, k: int = K) -> list[tuple[T, float]]:
    """(item, fused score) for every item of `rankings`, best first. Ties go to the item with the better
    single rank, then to the one seen first (the earlier ranking's)."""
    if k < 0:
        raise ValueError(f"k must be 0 or more, got {k}")
    scores: dict[T, float] = {}
    best: dict[T, int] = {}
    for ranking in rankings:
        # An item repeated within one ranking counts at its first place only.
        for rank, item in enumerate(dict.fromkeys(ranking), start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(rank, best.get(item, rank))
    seen = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], best[pair[0]], seen[pair[0]]))
