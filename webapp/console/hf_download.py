"""The Hugging Face Hub import's work, in a Celery worker: list the repo, download the weights, config and
tokenizer files into the first model root, then register the folder, with the job row showing progress.

The job row is the channel both ways: the worker writes the bytes fetched of the whole import there (at
most every PROGRESS_INTERVAL_S; the listing gives each file's size), and each such write only lands while
the job is still running, so an admin's Cancel (webapp.console.hf_import.hf_import_cancel) stops the
download at its next write; the worker then removes what it had fetched.
"""

from __future__ import annotations

import contextlib
import fnmatch
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone
from tqdm.std import tqdm

from webapp.console.models import ConsoleJob
from webapp.console.paths import allowed_roots
from webapp.console.replication import publish
from webapp.core.model_names import repo_names
from webapp.core.models import ModelRegistration

KIND = "hf_import"
PROBE_TIMEOUT_S = 10.0
PROGRESS_INTERVAL_S = 0.5  # between progress writes: also how soon a Cancel takes (plus one network read)
ACTIVE = (ConsoleJob.State.PENDING, ConsoleJob.State.RUNNING)
# Weights as safetensors plus config, tokenizer and chat template (newer repos keep it in its own .jinja
# file); never pickled checkpoints.
WANTED = ("*.json", "*.safetensors", "tokenizer.model", "*.txt", "*.tiktoken", "*.jinja")


def model_name_for(repo_id: str) -> str:
    """The name an imported repo is registered under: as mooncake.yaml's `model_id` of it is served."""
    return repo_names(repo_id).name


def free_aliases(repo_id: str) -> list[str]:
    """The repo's aliases (its short name) that no registered model answers to already: one that does
    would stop the import from registering at all."""
    taken = {
        n
        for name, aliases in ModelRegistration.objects.values_list("name", "aliases")
        for n in (name, *aliases)
    }
    return [alias for alias in repo_names(repo_id).aliases if alias not in taken]


class ImportCancelled(Exception):
    """The admin cancelled the import (the job row no longer reads running)."""


def _update(job: ConsoleJob, **fields: object) -> None:
    """Write `fields` while the job is still active; ImportCancelled once it is not (cancelled)."""
    written = ConsoleJob.objects.filter(pk=job.pk, state__in=ACTIVE).update(
        **fields, updated_at=timezone.now()
    )
    if not written:
        raise ImportCancelled
    for name, value in fields.items():
        setattr(job, name, value)


def fail(job: ConsoleJob, message: str) -> None:
    """Mark the job failed, unless it was cancelled meanwhile (then it stays cancelled)."""
    with contextlib.suppress(ImportCancelled):
        _update(job, state=ConsoleJob.State.FAILED, message=message)


class _FileProgress:
    """The bytes fetched of the whole import while one file downloads, written to the job row at most
    every PROGRESS_INTERVAL_S. `before`: the bytes of the files already fetched; `total`: of every file,
    None when the listing did not say (then the bytes are the current file's)."""

    def __init__(self, job: ConsoleJob, index: int, count: int, before: int, total: int | None) -> None:
        self.job, self.index, self.count = job, index, count
        self.before, self.all_bytes = before, total
        self.done, self.total, self._written = 0, 0, 0.0

    def start(self, total: int | None, initial: int) -> None:
        self.total, self.done = total or 0, initial  # initial: bytes an interrupted download kept
        self.write()

    def add(self, count: int) -> None:
        self.done += count
        if time.monotonic() - self._written >= PROGRESS_INTERVAL_S:
            self.write()

    def write(self) -> None:
        self._written = time.monotonic()
        if self.all_bytes:
            done = min(self.before + self.done, self.all_bytes)
            _update(self.job, bytes_done=done, bytes_total=self.all_bytes, progress=done / self.all_bytes)
            return
        share = min(1.0, self.done / self.total) if self.total else 0.0
        _update(
            self.job,
            bytes_done=self.done,
            bytes_total=self.total or None,
            progress=(self.index - 1 + share) / self.count,
        )

    def bar_class(self) -> type[tqdm]:
        """A progress bar class for huggingface_hub that draws nothing and feeds this object instead."""
        progress = self

        class JobBar(tqdm):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs.pop("name", None)
                super().__init__(*args, **{**kwargs, "disable": True})
                progress.start(kwargs.get("total"), int(kwargs.get("initial") or 0))

            def update(self, n: float | None = 1) -> bool | None:
                progress.add(int(n or 0))  # raises ImportCancelled out of the download: it stops there
                return None

        return JobBar


def _probe(endpoint: str | None) -> None:
    """One request without retries: the hub client retries a refused connection for ~25 s before failing."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise ConnectionError("HF_HUB_OFFLINE is set")
    url = (endpoint or constants.ENDPOINT).rstrip("/") + "/api/models?limit=1"
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return  # the hub answered; the listing reports any real problem
    except (OSError, ValueError) as exc:
        raise ConnectionError(f"{url}: {exc}") from exc


def hf_import_run(job_id: int) -> str:
    """Download the repo's safetensors, config and tokenizer files, then register the folder."""
    from huggingface_hub import HfApi, hf_hub_download

    job = ConsoleJob.objects.get(pk=job_id)
    repo_id = job.target
    endpoint = getattr(settings, "MOONCAKE_HF_ENDPOINT", None) or None
    try:
        _update(job, state=ConsoleJob.State.RUNNING, message="listing files", progress=0.0)
    except ImportCancelled:
        return "cancelled before it started"
    try:
        _probe(endpoint)
        siblings = HfApi(endpoint=endpoint).model_info(repo_id, files_metadata=True).siblings or []
        sizes = {
            s.rfilename: s.size
            for s in siblings
            if any(fnmatch.fnmatch(Path(s.rfilename).name, pattern) for pattern in WANTED)
        }
        files = list(sizes)
    except Exception as exc:
        message = (
            f"Could not reach the Hugging Face Hub for {repo_id} ({type(exc).__name__}: {exc}). "
            "The server may be offline: copy the model under a model root and register it from disk."
        )
        fail(job, message)
        return message
    if not any(f.endswith(".safetensors") for f in files) or "config.json" not in files:
        message = f"{repo_id} has no config.json and safetensors weights; only those are imported."
        fail(job, message)
        return message
    dest = allowed_roots()[0] / "hf" / repo_id.replace("/", "--")
    # Imported earlier (a model registered from this folder, under whatever name): never rewrite its files.
    earlier = ModelRegistration.objects.filter(source=str(dest.resolve())).first()
    if earlier is not None:
        message = f"{repo_id} is already imported into {dest}, registered as {earlier.name}."
        fail(job, message)
        return message
    known = [size for size in sizes.values() if size is not None]
    total = sum(known) if len(known) == len(sizes) and sum(known) > 0 else None
    try:
        before = 0
        for index, filename in enumerate(files, start=1):
            _update(job, message=f"downloading {filename} (file {index} of {len(files)})")
            progress = _FileProgress(job, index, len(files), before, total)
            hf_hub_download(
                repo_id, filename, local_dir=dest, endpoint=endpoint, tqdm_class=progress.bar_class()
            )
            before += sizes[filename] or 0
            # A small file may report no progress of its own: the row moves past it here.
            if total:
                _update(job, progress=before / total, bytes_done=before, bytes_total=total)
            else:
                _update(job, progress=index / len(files))
    except ImportCancelled:
        shutil.rmtree(dest, ignore_errors=True)  # the folder is this import's alone (checked above)
        return f"cancelled; removed {dest}"
    except Exception as exc:
        message = (
            f"Download of {repo_id} failed ({type(exc).__name__}: {exc}). Check the network or the mirror "
            "in HF_ENDPOINT, and HF_TOKEN for a gated repo, then import again."
        )
        fail(job, message)
        return message
    message = f"imported into {dest}; load it from the models page"
    try:  # marked done first: a Cancel that came after the last byte still wins, and leaves nothing behind
        _update(job, state=ConsoleJob.State.SUCCEEDED, message=message, progress=1.0)
    except ImportCancelled:
        shutil.rmtree(dest, ignore_errors=True)
        return f"cancelled; removed {dest}"
    ModelRegistration.objects.get_or_create(
        name=model_name_for(repo_id),
        defaults={"source": str(dest.resolve()), "aliases": free_aliases(repo_id)},
    )
    publish("worker")  # every replica registers it now rather than at its next periodic pass
    return message
