"""Fixtures for the serving tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache of the test's own (tests.webapp.serving.hub_cache fills it), with
    downloads off: nothing may fetch."""
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home
