"""Model sources an admin may register: only directories or GGUF files inside settings.MODEL_ROOTS."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from webapp.core.modelpaths import BUNDLED_SOURCES, check_source


class ModelPathError(ValueError):
    """The path is outside the allowed roots, missing, or not a model."""


def allowed_roots() -> list[Path]:
    return [Path(root).resolve() for root in settings.MODEL_ROOTS]


def model_source(raw: str, *, roots: list[Path] | None = None) -> str:
    """The source to register for `raw`: a bundled model's id as it is, else the confined path.

    The ids mean what they mean in mooncake.yaml (the engine resolves them, never under a root), so they
    are checked as `mooncake check` checks the yaml's rather than looked for on disk.
    """
    text = raw.strip()
    if text in BUNDLED_SOURCES:
        problem = check_source(text).problem
        if problem:
            raise ModelPathError(problem)
        return text
    return str(confine_model_path(raw, roots=roots))


def confine_model_path(raw: str, *, roots: list[Path] | None = None) -> Path:
    """The fully resolved path for `raw`, refusing traversal (`..`) and symlinks that leave every root.

    Relative paths are taken relative to the first root. resolve() follows every link first, so the
    containment check sees where the path really leads rather than how it is spelled.
    """
    roots = allowed_roots() if roots is None else [r.resolve() for r in roots]
    text = raw.strip()
    if not text or "\x00" in text:
        raise ModelPathError("Enter a path to a model directory or a .gguf file.")
    if not roots:
        raise ModelPathError("No model roots are configured (MOONCAKE_MODEL_ROOTS).")
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        candidate = roots[0] / candidate
    resolved = candidate.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        shown = ", ".join(str(r) for r in roots)
        raise ModelPathError(f"{text} is outside the allowed model roots ({shown}).")
    problem = check_source(str(resolved)).problem
    if problem:
        raise ModelPathError(problem)
    return resolved
