"""Whether a configured model runs in our engine, and how its weights are computed there: one line that
`mooncake check` and the console's Models page show for each model.

Decided from the files alone (a config.json's `architectures`, a GGUF's metadata and tensor table, never the
weights), the EngineConfig and the device. Importing this module loads no torch: the model registry and the
GGUF reader are imported when it is called, so the list of architectures is always the registry's own.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inference.config import EngineConfig

if TYPE_CHECKING:
    from inference.manager.footprint import DeviceFacts

_ELSEWHERE = {
    "openai": "the upstream server runs it",
    "vllm": "vLLM's own server runs it",
    "sglang": "SGLang's own server runs it",
    "tgi": "TGI's own server runs it",
}


@dataclass(frozen=True, slots=True)
class ModelFile:
    """What a model's files say about it."""

    architecture: str | None  # the HF `architectures` name (a GGUF's as converted); None: not readable
    gguf_architecture: str | None = None  # a GGUF's `general.architecture`
    file_types: frozenset[str] | None = None  # a GGUF's tensor types (GGUFFile.tensor_types); None: not one
    problem: str | None = None  # why architecture is None


@dataclass(frozen=True, slots=True)
class NativePath:
    engine_type: str
    architecture: str | None
    native: bool | None  # runs in our engine; None: not known (its files could not be read)
    weights: str | None  # the weight plan's label (quantization/plan.py), when native
    label: str


def native_path(source: Path | None, config: EngineConfig, device: DeviceFacts | None) -> NativePath:
    """`source`: the model's folder or .gguf on disk (None: not there, e.g. not downloaded yet). `device`:
    where a native model runs (None: not probed; the weights' path is then left out)."""
    kind = config.engine_type
    if kind in _ELSEWHERE:
        return NativePath(kind, None, False, None, f"not native: engine type {kind} ({_ELSEWHERE[kind]})")
    if config.task == "embed":
        return _encoder_path(source, config)
    found = (
        read_model_file(source) if source is not None else ModelFile(None, problem="its files are not here")
    )
    arch = found.architecture
    supported = arch is not None and arch in supported_architectures()
    if kind == "transformers":
        hint = f"; {arch} runs natively with engine type native" if supported else ""
        return NativePath(kind, arch, False, None, f"not native: engine type transformers{hint}")
    if arch is None:
        return NativePath(kind, None, None, None, f"native engine; architecture unknown ({found.problem})")
    if not supported:
        what = f"GGUF architecture {arch}" if found.gguf_architecture == arch else arch
        elsewhere = "" if found.gguf_architecture else " (engine type transformers does)"
        return NativePath(kind, arch, False, None, f"not native: our engine does not run {what}{elsewhere}")
    if device is None:
        return NativePath(kind, arch, True, None, f"native: {arch}")
    weights = _weights(found, config, device)
    return NativePath(kind, arch, True, weights, f"native: {arch}, {weights}")


def _encoder_path(source: Path | None, config: EngineConfig) -> NativePath:
    """Embedding models run in our BERT encoder (inference.frontends.embedding), which the decoders'
    registry does not list: read against it, a loaded embedder said "architecture unknown"."""
    hf, problem = _encoder_config(source, config.model)
    kind = config.engine_type
    if hf is None:
        return NativePath(
            kind, None, None, None, f"native embedding engine; architecture unknown ({problem})"
        )
    names = hf.get("architectures")
    arch = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    if hf.get("model_type") != "bert":  # what the encoder's loader accepts
        what = f"model_type {hf.get('model_type')!r}"
        return NativePath(kind, arch, False, None, f"not native: embeddings need a BERT encoder, not {what}")
    return NativePath(kind, arch, True, None, f"native: {arch or 'BERT'} encoder, embeddings")


def _encoder_config(source: Path | None, model: str) -> tuple[dict[str, Any] | None, str]:
    """The encoder's config.json, or why it cannot be read. The bundled model's is read from the zip in
    its package (its first load extracts it), so it is known before that load."""
    from inference.frontends.embedding.bundled import DEFAULT_EMBEDDING_SOURCE, bundled_zip

    try:
        if source is None and model == DEFAULT_EMBEDDING_SOURCE:
            with zipfile.ZipFile(bundled_zip()) as archive:
                raw = archive.read("config.json")
        elif source is None:
            return None, "its files are not here"
        elif not source.is_dir():
            return None, f"{source.name} is not a model folder"
        else:
            raw = (source / "config.json").read_bytes()
        hf = json.loads(raw)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:  # BundledModelError is a ValueError
        return None, str(exc)
    return (hf, "") if isinstance(hf, dict) else (None, "config.json is not a mapping")


def supported_architectures() -> tuple[str, ...]:
    from inference.models.registry import SUPPORTED_ARCHITECTURES

    return SUPPORTED_ARCHITECTURES


def _weights(found: ModelFile, config: EngineConfig, device: DeviceFacts) -> str:
    """The label of the plan the load makes (manager/footprint.py sizes the same plan)."""
    from inference.manager.footprint import weight_plan

    return weight_plan(config, device, found.file_types).label


def read_model_file(path: Path) -> ModelFile:
    """A folder's config.json or a .gguf's header, read again only when the file changes."""
    target = path / "config.json" if path.is_dir() else path
    try:
        stat = target.stat()
    except OSError as exc:
        return ModelFile(None, problem=f"cannot read {target.name}: {exc.strerror}")
    return _read(str(target), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read(target: str, mtime_ns: int, size: int) -> ModelFile:
    path = Path(target)
    if path.name != "config.json":
        return _read_gguf(path)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return ModelFile(None, problem=f"cannot read config.json: {exc}")
    names = config.get("architectures") if isinstance(config, dict) else None
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        return ModelFile(None, problem="config.json names no architectures")
    return ModelFile(names[0])


def _read_gguf(path: Path) -> ModelFile:
    from inference.models.gguf.architectures import GGUF_ARCHITECTURES
    from inference.models.gguf.reader import GGUFFile

    try:
        reader = GGUFFile(path)
    except (OSError, ValueError) as exc:  # GGUFFormatError is a ValueError
        return ModelFile(None, problem=f"cannot read {path.name}: {exc}")
    name = reader.field("general.architecture")
    if name is None:
        return ModelFile(None, problem=f"{path.name} has no general.architecture")
    # One the converter does not map stays its GGUF name: not loadable, whatever the registry holds.
    return ModelFile(GGUF_ARCHITECTURES.get(str(name), str(name)), str(name), reader.tensor_types())
