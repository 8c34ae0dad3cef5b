"""The engine's cache directory (converted models, the compiled decode kernel): private to the server user.

What the cache holds is loaded later as model weights or as native code, so anyone else who could write
there could make this process run their code. Directories are created 0700; before anything in them is
trusted, the directory and the file must be owned by this process's user and writable by no one else.
Temporary files get unpredictable names in the same directory, then an atomic rename.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

DEFAULT_CACHE_DIR = Path("var") / "cache"  # relative to the working directory, for offline use


class UnsafeCacheError(OSError):
    """A cache directory or file that someone other than this process's user could have written."""


def ensure_private_dir(path: Path) -> Path:
    """Create `path` 0700 where missing (parents too) and check it as `check_private` does."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(path)
    return path


def check_private(path: Path) -> None:
    """Raise UnsafeCacheError unless `path` is a directory or a regular file owned by this user that
    neither group nor others may write. Symlinks are followed: what counts is what will be read."""
    info = path.stat()
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        raise UnsafeCacheError(f"{path} is neither a directory nor a regular file")
    uid = os.getuid()
    if info.st_uid != uid:
        raise UnsafeCacheError(f"{path} is owned by uid {info.st_uid}, not by this process's uid {uid}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(info.st_mode)
        raise UnsafeCacheError(f"{path} is writable by group or others (mode {mode:o}); chmod go-w it")


def private_temp_file(directory: Path, *, prefix: str, suffix: str = ".tmp") -> Path:
    """A new empty 0600 file with an unpredictable name in `directory` (rename it into place when done)."""
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    os.close(fd)
    return Path(name)
