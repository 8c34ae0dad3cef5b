"""Prompt-lookup drafting: propose the tokens that followed the latest earlier match of the longest suffix.

For a sequence t[0..L) and n-gram lengths n_max down to n_min, find the largest n for which the suffix
t[L-n..L) also occurs ending at some earlier position j < L-1, take the largest such j (the most recent
occurrence: the text being repeated is most likely the nearest copy), and propose t[j+1 .. j+1+k), read
as a copy that may overlap its own output (see below).

It runs every step for every drafting sequence, so it is one vectorised pass: candidates are the earlier
positions holding the last token, and each longer suffix keeps only those whose preceding tokens agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def propose_ngram(token_ids: Sequence[int] | np.ndarray, k: int, n_min: int, n_max: int) -> list[int]:
    """Up to k draft tokens (fewer where the match is near the end; none without a match of >= n_min)."""
    length = len(token_ids)
    if k < 1 or n_min < 1 or length < n_min + 1:
        return []
    tokens = np.asarray(token_ids, dtype=np.int64)
    # End positions j of earlier occurrences (j <= L-2, so at least one token follows each).
    ends = np.flatnonzero(tokens[: length - 1] == tokens[length - 1])
    best: np.ndarray | None = ends if n_min <= 1 and ends.size else None
    n_max = min(n_max, length - 1)
    for n in range(2, n_max + 1):
        ends = ends[ends >= n - 1]
        ends = ends[tokens[ends - (n - 1)] == tokens[length - n]]
        if not ends.size:
            break
        if n >= n_min:
            best = ends
    if best is None:
        return []
    # Copy forward from the match, overlapping as LZ77 does: a match d tokens back predicts a text that
    # repeats with period d, so a run like "a b a b" drafts k tokens, not just the d that already exist.
    start = int(best[-1]) + 1
    period = length - start
    return [int(t) for t in tokens[start + np.arange(k) % period]]
