"""Model files found under the model roots that no registration uses yet: what the models page offers to
register with one click (GGUF files, and Hugging Face folders of config.json and safetensors)."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from inference.manager.gguf_check import gguf_problem
from webapp.console import lifecycle
from webapp.console.paths import ModelPathError, allowed_roots, confine_model_path
from webapp.core.models import ModelRegistration
from webapp.serving.runtime import get_runtime

# Where browser uploads are assembled, inside the first root (webapp.console.uploads); hidden, so the
# listing never offers a half-uploaded file.
UPLOADS_DIR = ".uploads"
# Deep enough for root/hf/org--name (a hub import) and root/vendor/family/model, shallow enough that a
# root pointed at a big disk lists in milliseconds.
MAX_DEPTH = 4
MAX_FOUND = 200
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._:-]+")
# A BERT folder is an embedding model (the only encoder our embedding engine serves).
_ENCODER_TYPES = frozenset({"bert"})


@dataclass(frozen=True, slots=True)
class FoundModel:
    """A model file or folder under a root, with what a one-click Register would use."""

    path: Path
    kind: str  # "gguf" or "folder"
    size_bytes: int
    name: str  # a free model name made from the file's
    task: str  # "generate" or "embed", guessed from its config
    problem: str = ""  # why it cannot be registered as it is (no button then)

    @property
    def shown(self) -> str:
        """The path relative to its root (the roots are printed above the list)."""
        for root in allowed_roots():
            if self.path.is_relative_to(root):
                return str(self.path.relative_to(root))
        return str(self.path)


def model_name_from(stem: str, *, taken: set[str]) -> str:
    """A registrable name (webapp.console.forms' rule) from a file or folder name, not in `taken`."""
    text = unicodedata.normalize("NFKC", stem)
    base = _NAME_CHARS.sub("-", text).strip(".-_:")[:90] or "model"
    if not base[0].isalnum():
        base = f"m{base}"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


@functools.lru_cache(maxsize=256)
def _cached_gguf_problem(path: str, size: int, mtime_ns: int) -> str:
    """gguf_problem, once per file version: the models page lists on every visit, and a header with a large
    vocabulary takes a while to parse."""
    return gguf_problem(Path(path))


def _folder_task(folder: Path) -> str:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return "generate"
    return "embed" if isinstance(config, dict) and config.get("model_type") in _ENCODER_TYPES else "generate"


def taken_names() -> set[str]:
    """Every name and alias a model answers to (console rows and the yaml's)."""
    rows = ModelRegistration.objects.values_list("name", "aliases")
    taken = {n for name, aliases in rows for n in (name, *aliases)}
    taken.update(n for info in get_runtime().manager().list() for n in (info.name, *info.aliases))
    return taken


def registered_paths() -> set[Path]:
    """The real paths every registration (console or yaml) loads from."""
    sources = set(ModelRegistration.objects.values_list("source", flat=True))
    sources.update(str(info.source) for info in get_runtime().manager().list())
    paths: set[Path] = set()
    for source in sources:
        path = Path(source).expanduser()
        if path.is_absolute() and path.exists():
            paths.add(path.resolve())
    return paths


def _walk(folder: Path, depth: int) -> list[Path]:
    """Model files and folders under `folder`, not descending into a model folder or hidden ones."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    found: list[Path] = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix.lower() == ".gguf":
            found.append(entry)
        elif entry.is_dir():
            if (entry / "config.json").is_file() and any(entry.glob("*.safetensors")):
                found.append(entry)
            elif depth < MAX_DEPTH:
                found.extend(_walk(entry, depth + 1))
    return found


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def unregistered_models(*, roots: list[Path] | None = None) -> list[FoundModel]:
    """What lies under the roots that no model is registered from, at most MAX_FOUND of them."""
    roots = allowed_roots() if roots is None else roots
    used = registered_paths()
    taken = {
        n
        for name, aliases in ModelRegistration.objects.values_list("name", "aliases")
        for n in (name, *aliases)
    }
    taken.update(n for info in get_runtime().manager().list() for n in (info.name, *info.aliases))
    found: list[FoundModel] = []
    for root in roots:
        for path in _walk(root, 1) if root.is_dir() else []:
            real = path.resolve()
            # A registered folder holding one GGUF loads that file: it counts as registered too.
            if real in used or (path.is_file() and real.parent in used):
                continue
            if not real.is_relative_to(root):  # a link leading out of the root: never offered
                continue
            name = model_name_from(path.stem if path.is_file() else path.name, taken=taken)
            taken.add(name)
            if path.is_file():
                stat = real.stat()
                problem = _cached_gguf_problem(str(real), stat.st_size, stat.st_mtime_ns)
                item = FoundModel(real, "gguf", stat.st_size, name, "generate", problem)
            else:
                item = FoundModel(real, "folder", _size(real), name, _folder_task(real))
            found.append(item)
            if len(found) >= MAX_FOUND:
                return found
    return found


def model_file_register(*, path: str) -> ModelRegistration:
    """Register a model file or folder under the roots as the listing offers it: named after its file (a
    free name), with its guessed task. ModelPathError when it is outside the roots or not loadable."""
    real = confine_model_path(path)
    if real.is_file():
        problem = gguf_problem(real)
        if problem:
            raise ModelPathError(problem)
    name = model_name_from(real.stem if real.is_file() else real.name, taken=taken_names())
    task = _folder_task(real) if real.is_dir() else "generate"
    return lifecycle.model_register(name=name, source=str(real), aliases=[], task=task)


def model_root() -> Path:
    """The first root: where uploads and hub imports go (MOONCAKE_DATA/models unless configured)."""
    return Path(settings.MODEL_ROOTS[0]).expanduser()


def ensure_model_root() -> Path | None:
    """Create the first root when it is missing (a new install has no models folder); None when no root
    is configured or it cannot be made (the models page then says why)."""
    if not settings.MODEL_ROOTS:
        return None
    root = model_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return root
