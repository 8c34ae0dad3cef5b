"""Whether first-run setup is done. Once an account exists it always will, so the process remembers a yes
and the first-run redirect, which runs on every page, stops asking the database."""

from __future__ import annotations

_done = False


def setup_known_done() -> bool:
    return _done


def remember_setup_done() -> None:
    global _done
    _done = True


def forget() -> None:
    """Ask the database again (tests: each starts with its own, perhaps empty, user table)."""
    global _done
    _done = False
