"""The cache directory is private: created 0700, trusted only when owned by us and writable by no one else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inference.cache_dir import UnsafeCacheError, check_private, ensure_private_dir, private_temp_file


def test_a_new_cache_dir_is_created_0700(tmp_path: Path) -> None:
    path = ensure_private_dir(tmp_path / "a" / "cache")
    assert path.is_dir() and path.stat().st_mode & 0o777 == 0o700


def test_an_existing_dir_only_others_can_read_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "cache"
    path.mkdir()
    path.chmod(0o755)
    assert ensure_private_dir(path) == path


@pytest.mark.parametrize("mode", [0o770, 0o757, 0o777])
def test_a_dir_group_or_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "cache"
    path.mkdir()
    path.chmod(mode)
    with pytest.raises(UnsafeCacheError, match=f"writable by group or others \\(mode {mode:o}\\)"):
        ensure_private_dir(path)


def test_a_file_others_may_write_is_refused_even_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "lib.so"
    target.write_bytes(b"")
    target.chmod(0o666)
    link = tmp_path / "link.so"
    link.symlink_to(target)
    for path in (target, link):
        with pytest.raises(UnsafeCacheError, match="writable by group or others"):
            check_private(path)
    target.chmod(0o700)
    check_private(link)


def test_what_someone_else_owns_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ensure_private_dir(tmp_path / "cache")
    monkeypatch.setattr(os, "getuid", lambda: os.stat(path).st_uid + 1)
    with pytest.raises(UnsafeCacheError, match="not by this process's uid"):
        check_private(path)


def test_temp_files_get_unpredictable_private_names(tmp_path: Path) -> None:
    first = private_temp_file(tmp_path, prefix=".x-")
    second = private_temp_file(tmp_path, prefix=".x-")
    assert first != second and first.parent == second.parent == tmp_path
    assert first.stat().st_mode & 0o777 == 0o600
