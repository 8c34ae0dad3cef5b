"""StopScanner against a brute-force search: same matches, same held-back tail, for text fed in pieces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.core.stop_strings import StopScanner

ALPHABET = "ab c"


def brute_match(text: str, start: int, stops: list[str]) -> tuple[int, str] | None:
    """Earliest-starting stop that ends inside text[start:]."""
    best = None
    for stop in stops:
        at = text.find(stop, max(0, start - len(stop) + 1))
        if at != -1 and (best is None or at < best[0]):
            best = (at, stop)
    return best


def brute_held_back(text: str, stops: list[str]) -> int:
    longest = max(len(s) for s in stops)
    for size in range(min(longest - 1, len(text)), 0, -1):
        if any(stop.startswith(text[-size:]) for stop in stops):
            return size
    return 0


@settings(max_examples=400, deadline=None)
@given(
    stops=st.lists(st.text(ALPHABET, min_size=1, max_size=6), min_size=1, max_size=4),
    pieces=st.lists(st.text(ALPHABET, max_size=5), max_size=12),
    report_from=st.integers(0, 12),
)
def test_scanner_equals_brute_force(stops, pieces, report_from):
    scanner = StopScanner(stops)
    text = ""
    for index, piece in enumerate(pieces):
        start = len(text)
        text += piece
        report = index >= report_from
        got = scanner.feed(piece, start, report=report)
        want = brute_match(text, start, stops) if report else None
        assert got == want, (text, start)
        if got is not None:
            return
        assert scanner.held_back() == brute_held_back(text, stops)


def test_a_long_stop_string_is_held_back_and_matched_across_pieces():
    stop = "x" * 5000 + "END"
    scanner = StopScanner([stop, "zz"])
    text = ""
    for piece in ["say ", "x" * 2000, "x" * 3000, "E", "N"]:
        assert scanner.feed(piece, len(text)) is None
        text += piece
    assert scanner.held_back() == 5002
    assert scanner.feed("D and more", len(text)) == (4, stop)
