"""Whether a file is a GGUF this engine can load, read from its header alone (torch-free): what the console
checks an uploaded or found file with before it registers it."""

from __future__ import annotations

from pathlib import Path

from inference.models.gguf.architectures import GGUF_ARCHITECTURES
from inference.models.gguf.reader import GGUFFile, GGUFFormatError


def gguf_problem(path: Path) -> str:
    """Why `path` cannot load as a GGUF (empty when it can): its magic, its header and tensor table (our
    reader parses them, so a file cut short is caught), and an architecture we implement."""
    try:
        architecture = GGUFFile(path).architecture
    except GGUFFormatError as exc:
        return str(exc)
    except (OSError, ValueError) as exc:  # an empty file cannot even be mapped
        return f"{path.name} is not a GGUF file ({exc})"
    if architecture not in GGUF_ARCHITECTURES:
        supported = ", ".join(sorted(GGUF_ARCHITECTURES))
        return f"{path.name}: GGUF architecture {architecture!r} is not supported (supported: {supported})"
    return ""
