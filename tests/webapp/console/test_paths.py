"""Registering from disk: only directories or GGUF files that really live under the allowed roots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.webapp.console.conftest import make_hf_dir
from webapp.console.paths import ModelPathError, confine_model_path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    make_hf_dir(root / "good")
    (root / "tiny.gguf").write_bytes(b"GGUF")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    return make_hf_dir(tmp_path / "outside")


def test_directory_and_gguf_inside_the_root(root: Path) -> None:
    assert confine_model_path(str(root / "good"), roots=[root]) == (root / "good").resolve()
    assert confine_model_path("tiny.gguf", roots=[root]) == (root / "tiny.gguf").resolve()


@pytest.mark.parametrize(
    "raw", ["../outside", "good/../../outside", "/etc", "/etc/passwd", "~", "good/../../../../../../etc"]
)
def test_traversal_is_refused(root: Path, outside: Path, raw: str) -> None:
    with pytest.raises(ModelPathError, match="outside the allowed model roots"):
        confine_model_path(raw, roots=[root])


def test_symlink_escape_is_refused(root: Path, outside: Path) -> None:
    (root / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ModelPathError, match="outside"):
        confine_model_path(str(root / "link"), roots=[root])
    (root / "sneaky.gguf").symlink_to(Path(os.devnull))
    with pytest.raises(ModelPathError, match="outside"):
        confine_model_path("sneaky.gguf", roots=[root])


def test_symlinked_parent_escape_is_refused(root: Path, outside: Path) -> None:
    (root / "door").symlink_to(outside.parent, target_is_directory=True)
    with pytest.raises(ModelPathError, match="outside"):
        confine_model_path("door/outside", roots=[root])


def test_symlink_inside_the_root_is_fine(root: Path) -> None:
    (root / "alias").symlink_to(root / "good", target_is_directory=True)
    assert confine_model_path("alias", roots=[root]) == (root / "good").resolve()


def test_root_given_through_a_symlink_still_contains_its_files(tmp_path: Path, root: Path) -> None:
    linked_root = tmp_path / "linked-root"
    linked_root.symlink_to(root, target_is_directory=True)
    assert confine_model_path(str(linked_root / "good"), roots=[linked_root]) == (root / "good").resolve()


@pytest.mark.parametrize("raw", ["", "  ", "nul\x00byte"])
def test_empty_or_nul_is_refused(root: Path, raw: str) -> None:
    with pytest.raises(ModelPathError):
        confine_model_path(raw, roots=[root])


def test_missing_or_not_a_model_is_refused(root: Path) -> None:
    (root / "notes.txt").write_text("hi", encoding="utf-8")
    (root / "empty").mkdir()
    for raw, message in (
        ("missing", "does not exist"),
        ("notes.txt", "not a .gguf"),
        ("empty", "config.json"),
    ):
        with pytest.raises(ModelPathError, match=message):
            confine_model_path(raw, roots=[root])
