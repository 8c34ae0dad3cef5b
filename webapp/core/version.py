"""The installed package's version (pyproject is the one place it is written)."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def app_version() -> str:
    try:
        return version("mooncake")
    except PackageNotFoundError:
        return "0+unknown"
