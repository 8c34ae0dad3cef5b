"""The Hugging Face Hub import's work, in a Celery worker: list the repo, download the weights, config and
tokenizer files into the first model root, then register the folder, with the job row showing progress."""

from __future__ import annotations

import fnmatch
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings

from webapp.console.models import ConsoleJob
from webapp.console.paths import allowed_roots
from webapp.console.replication import publish
from webapp.core.model_names import repo_names
from webapp.core.models import ModelRegistration

KIND = "hf_import"
PROBE_TIMEOUT_S = 10.0
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


def _update(job: ConsoleJob, **fields: object) -> None:
    for name, value in fields.items():
        setattr(job, name, value)
    job.save(update_fields=[*fields, "updated_at"])


def fail(job: ConsoleJob, message: str) -> None:
    _update(job, state=ConsoleJob.State.FAILED, message=message)


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
    _update(job, state=ConsoleJob.State.RUNNING, message="listing files", progress=0.0)
    try:
        _probe(endpoint)
        files = [
            f
            for f in HfApi(endpoint=endpoint).list_repo_files(repo_id)
            if any(fnmatch.fnmatch(Path(f).name, pattern) for pattern in WANTED)
        ]
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
    try:
        for index, filename in enumerate(files, start=1):
            _update(job, message=f"downloading {filename}")
            hf_hub_download(repo_id, filename, local_dir=dest, endpoint=endpoint)
            _update(job, progress=index / len(files))
    except Exception as exc:
        message = (
            f"Download of {repo_id} failed ({type(exc).__name__}: {exc}). Check the network or the mirror "
            "in HF_ENDPOINT, and HF_TOKEN for a gated repo, then import again."
        )
        fail(job, message)
        return message
    ModelRegistration.objects.get_or_create(
        name=model_name_for(repo_id),
        defaults={"source": str(dest.resolve()), "aliases": free_aliases(repo_id)},
    )
    publish("worker")  # every replica registers it now rather than at its next periodic pass
    message = f"imported into {dest}; load it from the models page"
    _update(job, state=ConsoleJob.State.SUCCEEDED, message=message, progress=1.0)
    return message
