"""The names a model is served under when its configuration gives none, derived from its source.

A hub id is served under the id itself, as vLLM does, so a client that sends what the server was started
with finds it; the repository's short name stays an alias. A Hugging Face cache snapshot folder
(`.../models--Org--Name/snapshots/<commit>`) is named as the hub id it was downloaded from, never after its
commit. Any other folder or .gguf file is named after itself. Importable before Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePath

from webapp.core.hub_models import parse_hub_id

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_EMBEDDING_NAME = "all-minilm-l6-v2"  # model_id `default-embedding`, the bundled embedding model
# ModelRegistration.name's max_length: the console records every served model under its name.
MAX_NAME_CHARS = 100
_CACHE_PREFIX = "models--"


@dataclass(frozen=True, slots=True)
class ServedNames:
    name: str
    aliases: tuple[str, ...] = ()


def names_from_source(source: str) -> ServedNames:
    """The name and aliases for a model loaded from `source` ("default", a hub id, a folder or a .gguf)."""
    if source == "default":
        return ServedNames(DEFAULT_MODEL_NAME)
    if source == "default-embedding":
        return ServedNames(DEFAULT_EMBEDDING_NAME)
    hub = parse_hub_id(source)
    if hub is not None:  # org/name[:rev] -> org/name; org/name/file.gguf -> itself, alias file
        full = f"{hub.repo_id}/{hub.filename}" if hub.filename else hub.repo_id
        return _served(full, _short(full), source)
    snapshot = _snapshot_id(PurePath(source))
    if snapshot is not None:
        return _served(snapshot, _short(snapshot))
    path = Path(source)
    return ServedNames(path.stem if path.suffix == ".gguf" else path.name or source)


def repo_names(repo_id: str) -> ServedNames:
    """The names for a model downloaded from hub repo `repo_id` into a folder of its own: those a
    `model_id` of that repo is served under (names_from_source's, without asking the disk)."""
    return _served(repo_id, _short(repo_id))


def unique_aliases(name: str, *groups: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The aliases of `groups`, in order, once each, without `name` itself."""
    seen: dict[str, None] = {}
    for group in groups:
        seen.update((alias, None) for alias in group if alias != name)
    return tuple(seen)


def _served(full: str, short: str, *more: str) -> ServedNames:
    if len(full) > MAX_NAME_CHARS:  # too long to record as a name: the short name, the id an alias
        return ServedNames(short, unique_aliases(short, (full, *more)))
    return ServedNames(full, unique_aliases(full, (short, *more)))


def _short(full: str) -> str:
    """The repository's name for a repo id; the file's stem for one file of a repo."""
    last = PurePath(full)
    return last.stem if last.suffix == ".gguf" else last.name


def _snapshot_id(path: PurePath) -> str | None:
    """`Org/Name` (or `Org/Name/file.gguf`) for a path inside a Hugging Face cache snapshot, else None."""
    parts = path.parts
    for i in range(len(parts) - 2):
        if parts[i].startswith(_CACHE_PREFIX) and parts[i + 1] == "snapshots":
            # The hub forbids "--" inside a repo id, so the cache's "--" separates org and name.
            repo = "/".join(parts[i].removeprefix(_CACHE_PREFIX).split("--"))
            inside = parts[i + 3 :]
            if not repo or (inside and PurePath(*inside).suffix != ".gguf"):
                return None
            return "/".join((repo, *inside))
    return None
