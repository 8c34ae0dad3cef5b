"""A GGUF uploaded from the browser in chunks, appended to a `.part` file in the first model root's hidden
uploads folder, checked as a GGUF of ours, then moved into the root.

The protocol (webapp.console.views.uploads, static/console/upload.js): `begin` says how many bytes of this
file (name and size) the server already has, so a reloaded page that picks the same file again continues
there; each `append` carries its offset and must start where the part ends; `finish` checks and moves it.
Nothing is ever held in memory beyond one read of the request body. An upload left untouched for
ABANDONED_AFTER_S is deleted at the next start or upload (uploads_prune).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from django.conf import settings

from webapp.console.model_files import UPLOADS_DIR, gguf_problem, model_root

logger = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 1024 * 1024  # what the page sends per request; also the chunk endpoint's body limit
# The upload endpoints' path (webapp.console.urls): their body limit is CHUNK_BYTES, set at start (apps.py).
UPLOADS_PATH = "/console/models/uploads/"
DEFAULT_MAX_BYTES = 64 * 1024**3
# Left free on the disk after an upload: the database and the converted-model cache live there too.
DISK_RESERVE_BYTES = 256 * 1024 * 1024
_READ_BYTES = 1024 * 1024
# An upload not appended to for this long was abandoned (a closed tab): its part is deleted at the next
# start or upload. Long enough to resume after a night; short enough that gigabytes do not pile up.
ABANDONED_AFTER_S = 48 * 3600
_MAX_NAME = 120
_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class Readable(Protocol):
    """A request body (Django's HttpRequest reads it in pieces, from the server's spool file)."""

    def read(self, size: int, /) -> bytes: ...


class UploadError(ValueError):
    """Input the upload refuses: said to the admin as it is."""


class OffsetMismatch(UploadError):
    """A chunk that does not start where the part file ends (a retry, another tab): `offset` is where."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"the upload is at byte {offset}; continue from there")
        self.offset = offset


@dataclass(frozen=True, slots=True)
class UploadState:
    name: str
    size: int  # the whole file's bytes, as the browser declared them
    offset: int  # bytes on disk so far


def max_upload_bytes() -> int:
    return int(getattr(settings, "MOONCAKE_MODEL_UPLOAD_MAX_BYTES", DEFAULT_MAX_BYTES))


def upload_name(raw: str) -> str:
    """The file name the upload is saved under: a plain `.gguf` name, or UploadError saying why not.

    Normalized (NFKC) and reduced to letters, digits, '.', '_' and '-' (others become '-'); a name with a
    path separator is refused rather than cut, since a browser never sends one.
    """
    text = unicodedata.normalize("NFKC", raw).strip()
    if not text:
        raise UploadError("Choose a .gguf file to upload.")
    if "/" in text or "\\" in text or "\x00" in text:
        raise UploadError("The file name may not contain '/', '\\' or NUL.")
    if not text.lower().endswith(".gguf"):
        raise UploadError(f"{text} is not a .gguf file: only GGUF models can be uploaded.")
    stem = "".join(c if c in _ALLOWED else "-" for c in text[: -len(".gguf")]).strip(".-")
    if not stem:
        raise UploadError(f"{text} has no name before .gguf.")
    return f"{stem[: _MAX_NAME - 5]}.gguf"


def _folder() -> Path:
    folder = model_root() / UPLOADS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _part(name: str) -> Path:
    return _folder() / f"{upload_name(name)}.part"


def _meta(name: str) -> Path:
    return _folder() / f"{upload_name(name)}.json"


def _declared_size(name: str) -> int | None:
    try:
        size = json.loads(_meta(name).read_text())["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return size if isinstance(size, int) else None


def upload_begin(*, name: str, size: int) -> UploadState:
    """Start, or continue, the upload of `name` (`size` bytes): how many bytes the server has of it.

    A part of the same name but another size is another file: it starts over.
    """
    name = upload_name(name)
    limit = max_upload_bytes()
    if size <= 0:
        raise UploadError(f"{name} is empty.")
    if size > limit:
        raise UploadError(f"{name} is {size} bytes; uploads may be at most {limit} bytes.")
    if (model_root() / name).exists():
        raise UploadError(f"{name} is already in the models folder: register it from the list of files.")
    uploads_prune()  # before the free-space check: what an abandoned upload holds is free again
    part, meta = _part(name), _meta(name)
    same = _declared_size(name) == size and part.is_file()
    offset = min(part.stat().st_size, size) if same else 0
    free = shutil.disk_usage(part.parent).free
    if size - offset > free - DISK_RESERVE_BYTES:  # refused before a byte is written
        raise UploadError(
            f"Not enough disk space for {name}: {size - offset} more bytes are needed and "
            f"{max(0, free - DISK_RESERVE_BYTES)} are free under {model_root()}."
        )
    if not same:
        part.unlink(missing_ok=True)
        meta.write_text(json.dumps({"size": size}))
        part.touch()
    return UploadState(name, size, offset)


def upload_append(*, name: str, offset: int, body: Readable, length: int) -> UploadState:
    """Append `length` bytes read from `body` at `offset`, which must be where the part file ends."""
    name = upload_name(name)
    size = _declared_size(name)
    part = _part(name)
    if size is None or not part.is_file():
        raise UploadError(f"No upload of {name} is in progress: start it again.")
    if length <= 0 or length > CHUNK_BYTES:
        raise UploadError(f"A chunk must have 1 to {CHUNK_BYTES} bytes, not {length}.")
    with part.open("ab") as out:
        fcntl.flock(out, fcntl.LOCK_EX)  # two tabs uploading the same file take turns, never interleave
        at = out.seek(0, os.SEEK_END)
        if at != offset:
            raise OffsetMismatch(at)
        if offset + length > size:
            raise UploadError(f"The chunk runs past the file's declared {size} bytes.")
        left = length
        while left > 0 and (piece := body.read(min(_READ_BYTES, left))):
            out.write(piece)
            left -= len(piece)
        out.flush()
        return UploadState(name, size, out.tell())


def upload_finish(*, name: str) -> Path:
    """Check the whole upload as a GGUF of ours and move it into the models folder: its final path.

    A part that fails the check is deleted (it can never pass), so the next try starts over.
    """
    name = upload_name(name)
    size, part = _declared_size(name), _part(name)
    have = part.stat().st_size if part.is_file() else 0
    if size is None or have != size:
        raise UploadError(f"{name} is not complete: {have} of {size or '?'} bytes arrived.")
    problem = gguf_problem(part)
    if problem:
        upload_discard(name=name)
        raise UploadError(problem.replace(part.name, name))
    target = model_root() / name
    if target.exists():
        raise UploadError(f"{name} is already in the models folder: register it from the list of files.")
    os.replace(part, target)  # same folder tree, so atomic: the root never holds half a file
    _meta(name).unlink(missing_ok=True)
    return target.resolve()


def upload_discard(*, name: str) -> None:
    """Drop an upload's part and its size note."""
    _part(name).unlink(missing_ok=True)
    _meta(name).unlink(missing_ok=True)


def uploads_prune(*, now: float | None = None) -> list[str]:
    """Delete the uploads nobody appended to for ABANDONED_AFTER_S: the names of those deleted."""
    folder = model_root() / UPLOADS_DIR
    if not folder.is_dir():
        return []
    cutoff = (time.time() if now is None else now) - ABANDONED_AFTER_S
    pruned = []
    for part in folder.glob("*.part"):
        try:
            abandoned = part.stat().st_mtime < cutoff
        except FileNotFoundError:  # finished or discarded meanwhile
            continue
        if abandoned:
            name = part.name.removesuffix(".part")
            part.unlink(missing_ok=True)
            (folder / f"{name}.json").unlink(missing_ok=True)
            pruned.append(name)
    for meta in folder.glob("*.json"):  # a size note whose part is gone
        if not (folder / f"{meta.name.removesuffix('.json')}.part").exists():
            meta.unlink(missing_ok=True)
    if pruned:
        logger.info(
            "Deleted abandoned model uploads (untouched for %d h): %s", ABANDONED_AFTER_S // 3600, pruned
        )
    return pruned
