"""What `mooncake serve` does before it listens: safe settings for a bind other machines can reach, and
files only the server's own user can read. Importable before Django is set up: no settings, no models."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# env_bool's spellings of "on" (webapp.settings.env); anything else is off or an error reported there.
_TRUE = {"1", "true", "yes", "on"}
# The local settings' defaults (DEBUG on, API keys off) are safe only while nobody else can connect.
EXPOSED_ENV = {"DEBUG": "0", "MOONCAKE_API_AUTH": "required"}


class UnsafeBindError(Exception):
    """The environment explicitly asks for settings that must not face the network."""


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches; a name other than localhost may resolve anywhere."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def exposed_bind_env(host: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set before Django starts for a bind on `host`: none on loopback, else DEBUG off
    and API keys required. An explicit DEBUG=1 or MOONCAKE_API_AUTH=off is refused rather than overridden,
    so the operator learns that their setting did not hold."""
    if is_loopback(host):
        return {}
    problems = []
    if environ.get("DEBUG", "").strip().lower() in _TRUE:
        problems.append("DEBUG is on (error pages show settings and code to anyone)")
    auth = environ.get("MOONCAKE_API_AUTH", "").strip().lower()
    if auth and auth != "required":
        problems.append(f"MOONCAKE_API_AUTH={auth} (anyone could use /v1 without a key)")
    if problems:
        raise UnsafeBindError(
            f"refusing to listen on {host}, which other machines can reach, while "
            + " and ".join(problems)
            + ". Unset them, or bind 127.0.0.1 and put a proxy in front."
        )
    return dict(EXPOSED_ENV)


def make_private(data_dir: Path, database: Path | None) -> None:
    """The data directory (keys, database, uploads) 0700 and the SQLite file 0600. The database is created
    empty with its mode before migrate opens it, so it is never readable by others; SQLite gives its
    journal and WAL files the database's mode."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    if database is None or not database.parent.is_dir():
        return
    os.close(os.open(database, os.O_CREAT | os.O_WRONLY, 0o600))
    database.chmod(0o600)


def sqlite_file(database: Mapping[str, Any]) -> Path | None:
    """The file of a SQLite database setting; None for another engine or an in-memory database."""
    name = str(database.get("NAME") or "")
    if not str(database.get("ENGINE", "")).endswith("sqlite3") or not name or ":memory:" in name:
        return None
    return None if "mode=memory" in name else Path(name)
