"""Stop strings matched in time linear in the new text, whatever their length.

Each stop string gets a Knuth-Morris-Pratt automaton whose state is the longest prefix of the stop string
that the text ends with. Feeding a character moves each state in amortized O(1), a state reaching the
full length is a match, and the largest state is exactly the tail that must be held back because it could
still become a stop string. Re-searching the whole tail at every length (what this replaces) cost
O(stop length²) per sequence per step, so one long stop string slowed every step for everyone.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1024)
def _failure(stop: str) -> tuple[int, ...]:
    """failure[i]: length of the longest proper prefix of stop[: i + 1] that is also its suffix."""
    table = [0] * len(stop)
    k = 0
    for i in range(1, len(stop)):
        while k and stop[i] != stop[k]:
            k = table[k - 1]
        if stop[i] == stop[k]:
            k += 1
        table[i] = k
    return tuple(table)


class StopScanner:
    """Per-sequence matching state over the text a sequence produces, fed in pieces."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = list(stops)
        self._tables = [_failure(stop) for stop in self._stops]  # shared between sequences by the cache
        self._states = [0] * len(self._stops)

    def feed(self, text: str, offset: int, *, report: bool = True) -> tuple[int, str] | None:
        """Advance over `text`, which starts at `offset` in the whole output.

        Returns (start in the whole output, stop string) of the match that starts first among those that
        end inside `text`, or None. With report=False matches are only stepped over (min_tokens not met).
        """
        best: tuple[int, str] | None = None
        for j, stop in enumerate(self._stops):
            table, state, size = self._tables[j], self._states[j], len(stop)
            for i, char in enumerate(text):
                if state == size:  # continue after a match that was not reported
                    state = table[state - 1]
                while state and stop[state] != char:
                    state = table[state - 1]
                if stop[state] == char:
                    state += 1
                if state == size and report:
                    start = offset + i - size + 1
                    if best is None or start < best[0]:
                        best = (start, stop)
                    break  # later matches of this stop start later
            self._states[j] = state
        return best

    def held_back(self) -> int:
        """Length of the longest tail, shorter than the longest stop string, that starts a stop string."""
        longest = max((len(stop) for stop in self._stops), default=0)
        held = 0
        for state, table in zip(self._states, self._tables, strict=True):
            # Only a full, unreported match of the longest stop can be too long; the next shorter tail
            # that still starts it is its failure link.
            held = max(held, state if state < longest else table[state - 1])
        return held
