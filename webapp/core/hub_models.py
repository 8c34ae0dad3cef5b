"""Models named by a Hugging Face Hub id, fetched into the standard Hugging Face cache before they load.

`model_id` resolves in this order: "default", a local folder or .gguf file that exists, then a hub id:
`org/name`, `org/name:revision` or `org/name/file.gguf` (one GGUF of a repo, optionally `:revision`).

The web layer downloads, not the engine: huggingface_hub reads HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE and
HF_HOME itself, as for every Hugging Face tool, while `inference` never reads the environment; the engine
is handed the local snapshot folder. A snapshot already in the cache is used without any network (so a
branch such as `main` is not checked for updates: pin a revision, or delete the cached copy, to move on).
Only safetensors, configs, tokenizer files and chat templates are fetched, never pickled weights.

Importable before Django; huggingface_hub is imported where a download happens.

Over 300 lines: resolving, the cache check, the download with its progress, the failure messages and the
factory wrapper are one path a hub model takes to load, read top to bottom.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from inference.api import IN_PROCESS_TYPES, SUPERVISED_TYPES

if TYPE_CHECKING:
    from inference.api import EngineConfig

logger = logging.getLogger(__name__)

E = TypeVar("E")
Progress = Callable[[int, int | None], None]

# What a native engine loads (weights, config, tokenizer, chat template, generation config).
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model", "chat_template.json", "*.jinja",
)  # fmt: skip
MODEL_FILES = (
    "*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json", *TOKENIZER_FILES
)  # fmt: skip
# An `openai` engine only templates prompts here: its tokenizer and config are enough.
TEMPLATE_FILES = ("config.json", "generation_config.json", *TOKENIZER_FILES)
PROGRESS_LOG_SECONDS = 5.0

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_HUB_ID = re.compile(
    rf"^(?P<repo>{_PART}/{_PART})(?P<file>(?:/[^:/]+)*/[^:/]+\.gguf)?(?::(?P<rev>[\w./-]+))?$"
)


class HubDownloadError(RuntimeError):
    """A hub model could not be fetched; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class HubRef:
    repo_id: str
    revision: str = "main"
    filename: str | None = None  # one .gguf of the repo, else the whole (filtered) snapshot

    def __str__(self) -> str:
        path = f"{self.repo_id}/{self.filename}" if self.filename else self.repo_id
        return path if self.revision == "main" else f"{path}:{self.revision}"


def parse_hub_id(source: str) -> HubRef | None:
    """The hub repo `source` names, or None when it is "default", exists on disk or is no hub id."""
    if source == "default" or Path(source).expanduser().exists():
        return None
    match = _HUB_ID.match(source)
    if match is None:
        return None
    file = match["file"]
    return HubRef(match["repo"], match["rev"] or "main", file.lstrip("/") if file else None)


def hub_cache_dir(cache_dir: Path | None = None) -> Path:
    """Where snapshots go: `cache_dir`, else the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache)."""
    if cache_dir is not None:
        return cache_dir
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def patterns_for(engine_type: str) -> tuple[str, ...]:
    """Weights for the engines that run in this process; only the tokenizer for one that runs elsewhere."""
    return MODEL_FILES if engine_type in IN_PROCESS_TYPES else TEMPLATE_FILES


def cached(ref: HubRef, patterns: Sequence[str], cache_dir: Path | None = None) -> Path | None:
    """The local path of `ref` when the cache holds everything it needs; never touches the network."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(
            snapshot_download(
                ref.repo_id,
                revision=ref.revision,
                allow_patterns=[ref.filename] if ref.filename else list(patterns),
                cache_dir=hub_cache_dir(cache_dir),
                local_files_only=True,
            )
        )
    except Exception:  # not cached, or partly (the client's errors differ across versions): fetch it
        logger.debug("%s is not (completely) in the Hugging Face cache", ref, exc_info=True)
        return None
    return _usable(folder, ref, patterns)


def _usable(folder: Path, ref: HubRef, patterns: Sequence[str]) -> Path | None:
    if ref.filename is not None:
        path = folder / ref.filename
        return path if path.is_file() else None
    if "*.safetensors" not in patterns:
        return folder if any((folder / name).is_file() for name in TOKENIZER_FILES[:2]) else None
    if not (folder / "config.json").is_file():
        return None
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            return None
        return folder if all((folder / shard).is_file() for shard in shards) else None
    return folder if any(folder.glob("*.safetensors")) else None


def fetch(
    ref: HubRef,
    *,
    patterns: Sequence[str] = MODEL_FILES,
    cache_dir: Path | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    on_progress: Progress | None = None,
    log_every: float = PROGRESS_LOG_SECONDS,
) -> Path:
    """The local path of `ref` (snapshot folder, or the .gguf in it): from the cache, else downloaded.

    None for endpoint and token: huggingface_hub's own (HF_ENDPOINT, HF_TOKEN or the saved login).
    Raises HubDownloadError saying why (unknown repo, gated, offline and not cached, disk full, ...).
    """
    found = cached(ref, patterns, cache_dir)
    if found is not None:
        logger.info("Using %s from the Hugging Face cache (%s)", ref, found)
        return found
    from huggingface_hub import HfApi, snapshot_download

    cache = hub_cache_dir(cache_dir)
    wanted = [ref.filename] if ref.filename else list(patterns)
    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(
            ref.repo_id, revision=ref.revision, files_metadata=True
        )
        sizes = {s.rfilename: s.size or 0 for s in info.siblings or [] if _matches(s.rfilename, wanted)}
        _check_files(ref, sizes)
        total = sum(sizes.values())
        logger.info("Downloading %s (%s) into %s", ref, _megabytes(total), cache)
        started = time.monotonic()
        with _Monitor(ref, cache, info.sha or ref.revision, sizes, on_progress, log_every):
            folder = snapshot_download(
                ref.repo_id,
                revision=ref.revision,  # not the sha: a branch or tag gets its ref, for offline use later
                allow_patterns=sorted(sizes),
                cache_dir=cache,
                endpoint=endpoint,
                token=token,
            )
    except HubDownloadError:
        raise
    except Exception as exc:
        raise HubDownloadError(_explain(ref, exc, cache)) from exc
    logger.info("Downloaded %s in %.1fs", ref, time.monotonic() - started)
    path = _usable(Path(folder), ref, patterns)
    if path is None:
        raise HubDownloadError(f"{ref}: the download finished but the files are incomplete; load it again")
    return path


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch(name, pattern) for pattern in patterns)


def _check_files(ref: HubRef, sizes: dict[str, int]) -> None:
    if ref.filename is not None and ref.filename not in sizes:
        raise HubDownloadError(f"{ref.repo_id} has no file {ref.filename}")
    if ref.filename is None and not sizes:
        raise HubDownloadError(f"{ref} has none of the files a model needs (config, tokenizer, safetensors)")
    if ref.filename is None and "config.json" in sizes and not any(n.endswith(".safetensors") for n in sizes):
        raise HubDownloadError(
            f"{ref} has no safetensors weights (only pickles, which are never loaded, or GGUF files: "
            f"name one, e.g. {ref.repo_id}/<file>.gguf)"
        )


def _explain(ref: HubRef, exc: Exception, cache: Path) -> str:
    """One sentence for each way a download fails, naming the setting that fixes it."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):
        return (
            f"{ref.repo_id} is gated: accept its terms on the hub with your account and set HF_TOKEN "
            "(or run `hf auth login`) before loading it again"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return f"no model repository {ref.repo_id} on the hub (check the id; a private one needs HF_TOKEN)"
    if isinstance(exc, RevisionNotFoundError):
        return f"{ref.repo_id} has no revision {ref.revision!r}"
    if isinstance(exc, OfflineModeIsEnabled | LocalEntryNotFoundError):
        return f"{ref} is not in the Hugging Face cache ({cache}) and downloads are off (HF_HUB_OFFLINE)"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"the disk is full: no room to download {ref} into {cache} (free space, or set HF_HOME)"
    return (
        f"downloading {ref} failed: {type(exc).__name__}: {exc}. Check the network or the mirror in "
        "HF_ENDPOINT, then press Load to retry; or fill the cache elsewhere and set HF_HUB_OFFLINE=1"
    )


def _megabytes(size: int | None) -> str:
    return "size unknown" if size is None else f"{size / 1e6:.1f} MB"


class _Monitor:
    """Polls the cache while snapshot_download runs: finished files of the snapshot plus the blobs still
    being written. Reading the folder, not the client's progress bars, keeps this off its internals."""

    def __init__(
        self,
        ref: HubRef,
        cache: Path,
        commit: str,
        sizes: dict[str, int],
        on_progress: Progress | None,
        log_every: float,
    ) -> None:
        storage = cache / f"models--{ref.repo_id.replace('/', '--')}"
        self._snapshot, self._blobs = storage / "snapshots" / commit, storage / "blobs"
        self._ref, self._sizes, self._total = ref, sizes, sum(sizes.values())
        self._on_progress, self._log_every = on_progress, log_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mooncake-hub-progress", daemon=True)

    def __enter__(self) -> _Monitor:
        self._report(0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            self._report(self._total)

    def done(self) -> int:
        finished = sum(size for name, size in self._sizes.items() if (self._snapshot / name).exists())
        try:
            partial = sum(p.stat().st_size for p in self._blobs.glob("*.incomplete"))
        except OSError:
            partial = 0
        return min(finished + partial, self._total)

    def _report(self, done: int) -> None:
        if self._on_progress is not None:
            try:
                self._on_progress(done, self._total)
            except Exception:  # showing progress must never break the download
                logger.exception("Reporting the download progress of %s failed", self._ref)

    def _run(self) -> None:
        logged = time.monotonic()
        while not self._stop.wait(0.5):
            done = self.done()
            self._report(done)
            if time.monotonic() - logged >= self._log_every:
                logged = time.monotonic()
                percent = 100 * done // self._total if self._total else 0
                total = _megabytes(self._total)
                logger.info("Downloading %s: %s of %s (%d%%)", self._ref, _megabytes(done), total, percent)


def hub_engine_factory(
    factory: Callable[[EngineConfig], E],
    *,
    on_progress: Callable[[EngineConfig, int, int | None], None],
    cache_dir: Path | None = None,
) -> Callable[[EngineConfig], E]:
    """`factory` for configs whose model is a hub id, fetched first: the engine gets the local path, and
    the hub cache joins model_roots (where set), as a trusted root for downloaded snapshots. Engines that
    fetch models themselves (vllm, sglang, tgi) get the config unchanged."""

    def start(config: EngineConfig) -> E:
        ref = parse_hub_id(config.model)
        if ref is None or config.engine_type in SUPERVISED_TYPES:
            return factory(config)
        local = fetch(
            ref,
            patterns=patterns_for(config.engine_type),
            cache_dir=cache_dir,
            on_progress=lambda done, total: on_progress(config, done, total),
        )
        roots = config.model_roots
        if roots is not None:
            roots = (*roots, str(hub_cache_dir(cache_dir)))
        return factory(dataclasses.replace(config, model=str(local), model_roots=roots))

    return start
