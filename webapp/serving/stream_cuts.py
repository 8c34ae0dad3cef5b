"""What a stopping server calls at its drain deadline to end the streams still running.

The app that renders a kind of stream (the API's SSE) registers how to cut its streams, so the server
needs no import of that app.
"""

from __future__ import annotations

from collections.abc import Callable

# Each cutter ends its streams with an error event and returns how many were running.
_cutters: list[Callable[[], int]] = []


def register_stream_cutter(cutter: Callable[[], int]) -> None:
    if cutter not in _cutters:
        _cutters.append(cutter)


def cut_all_streams() -> int:
    return sum(cutter() for cutter in _cutters)
