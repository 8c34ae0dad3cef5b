"""`mooncake serve`'s guards: safe settings for a bind others can reach, and private data files."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from webapp.core.serve_safety import (
    EXPOSED_ENV,
    UnsafeBindError,
    exposed_bind_env,
    is_loopback,
    make_private,
    sqlite_file,
)
from webapp.settings.local import _persistent_secret_key


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", " LOCALHOST "])
def test_loopback_binds_change_nothing(host: str) -> None:
    assert is_loopback(host)
    assert exposed_bind_env(host, {"DEBUG": "1", "MOONCAKE_API_AUTH": "off"}) == {}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.5", "example.com", "[2001:db8::1]"])
def test_other_binds_force_debug_off_and_api_keys(host: str) -> None:
    assert not is_loopback(host)
    assert exposed_bind_env(host, {}) == {"DEBUG": "0", "MOONCAKE_API_AUTH": "required"}
    assert exposed_bind_env(host, {"DEBUG": "0", "MOONCAKE_API_AUTH": "Required"}) == EXPOSED_ENV


@pytest.mark.parametrize(
    ("environ", "reason"),
    [
        ({"DEBUG": "1"}, "DEBUG is on"),
        ({"DEBUG": "yes"}, "DEBUG is on"),
        ({"MOONCAKE_API_AUTH": "off"}, "MOONCAKE_API_AUTH=off"),
    ],
)
def test_an_explicit_unsafe_setting_is_refused_not_overridden(environ: dict[str, str], reason: str) -> None:
    with pytest.raises(UnsafeBindError, match=reason):
        exposed_bind_env("0.0.0.0", environ)


def test_make_private_locks_the_data_directory_and_creates_the_database_0600(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    database = data / "mooncake.sqlite3"
    make_private(data, database)
    assert _mode(data) == 0o700
    assert database.is_file() and database.stat().st_size == 0 and _mode(database) == 0o600
    database.write_bytes(b"kept")
    database.chmod(0o644)  # a database an earlier version created
    make_private(data, database)
    assert _mode(database) == 0o600 and database.read_bytes() == b"kept"


def test_make_private_creates_a_missing_data_directory(tmp_path: Path) -> None:
    make_private(tmp_path / "new" / "data", None)
    assert _mode(tmp_path / "new" / "data") == 0o700


def test_sqlite_file_only_for_a_file_database(tmp_path: Path) -> None:
    sqlite = "django.db.backends.sqlite3"
    assert sqlite_file({"ENGINE": sqlite, "NAME": str(tmp_path / "db")}) == tmp_path / "db"
    assert sqlite_file({"ENGINE": sqlite, "NAME": ":memory:"}) is None
    assert sqlite_file({"ENGINE": sqlite, "NAME": "file:x?mode=memory&cache=shared"}) is None
    assert sqlite_file({"ENGINE": "django.db.backends.postgresql", "NAME": "mooncake"}) is None


def test_the_secret_key_file_is_created_0600_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    key = _persistent_secret_key(path)
    assert len(key) >= 50 and _mode(path) == 0o600
    assert _persistent_secret_key(path) == key


def test_concurrent_creators_all_read_the_winners_key(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    keys: list[str] = []
    start = threading.Barrier(8)

    def create() -> None:
        start.wait()
        keys.append(_persistent_secret_key(path))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 8 and len(set(keys)) == 1
    assert path.read_text(encoding="utf-8") == keys[0] and _mode(path) == 0o600
