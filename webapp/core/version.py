"""The app's version: pyproject.toml is the one place it is written."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@cache
def app_version() -> str:
    # A checkout run without `pip install -e .` has no metadata; its pyproject.toml is right there.
    if PYPROJECT.is_file():
        return str(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"])
    try:
        return version("mooncake")
    except PackageNotFoundError:
        return "0+unknown"
