"""Importing from the Hugging Face Hub: a Celery job that fails cleanly when the hub is unreachable."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from webapp.console.hf_download import hf_import_run
from webapp.console.hf_import import HubImportError, validate_repo_id
from webapp.console.models import AuditLog, ConsoleJob
from webapp.console.registry import sync_manager
from webapp.console.tasks import import_hf_model
from webapp.core.models import ModelRegistration


@pytest.fixture
def offline(settings: Any, model_root: Any) -> None:
    # Port 9 (discard) on loopback: connection refused at once, so the test never waits on DNS.
    settings.MOONCAKE_HF_ENDPOINT = "http://127.0.0.1:9"


@pytest.mark.parametrize("repo_id", ["", "noslash", "a/b/c", "../x/y", "a/..", "a b/c", "/abs/path"])
def test_bad_repo_ids(repo_id: str) -> None:
    with pytest.raises(HubImportError):
        validate_repo_id(repo_id)


@pytest.mark.database
def test_offline_import_fails_with_a_clear_message(staff_client: Client, manager: Any, offline: None) -> None:
    response = staff_client.post(reverse("console:model-import"), {"repo_id": "HuggingFaceTB/SmolLM2-135M"})
    assert response.status_code == 302 and response["Location"] == reverse("console:jobs")
    job = ConsoleJob.objects.get()
    assert job.state == ConsoleJob.State.PENDING and job.celery_id  # queued on the broker
    assert AuditLog.objects.get(action="model.import").target == "HuggingFaceTB/SmolLM2-135M"

    result = import_hf_model.apply(args=[job.pk])  # what the worker runs
    job.refresh_from_db()
    assert job.state == ConsoleJob.State.FAILED
    assert "Could not reach the Hugging Face Hub" in job.message and "offline" in job.message
    assert result.get() == job.message
    assert not ModelRegistration.objects.exists()
    page = staff_client.get(reverse("console:jobs")).content.decode()
    assert "Could not reach the Hugging Face Hub" in page and 'data-state="failed"' in page


@pytest.mark.database
def test_hub_offline_mode_also_fails_cleanly(db: None, model_root: Any, monkeypatch: Any) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    job = ConsoleJob.objects.create(kind="hf_import", target="org/model")
    message = hf_import_run(job.pk)
    job.refresh_from_db()
    assert job.state == ConsoleJob.State.FAILED and job.message == message
    assert "Could not reach the Hugging Face Hub" in message


def test_invalid_repo_id_is_refused_before_queueing(staff_client: Client, manager: Any) -> None:
    staff_client.post(reverse("console:model-import"), {"repo_id": "../../etc"})
    assert not ConsoleJob.objects.exists()


@pytest.mark.database
def test_import_reports_progress_and_registers(
    db: None, model_root: Path, manager: Any, monkeypatch: Any
) -> None:
    """The hub itself is out of reach here, so its two calls are replaced; everything around them is real."""
    import huggingface_hub

    files = [
        "config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", "pytorch_model.bin",
        "README.md",
    ]  # fmt: skip
    progress: list[float] = []

    def download(repo_id: str, filename: str, *, local_dir: Path, endpoint: str | None, **_: Any) -> str:
        progress.append(ConsoleJob.objects.get().progress)  # what the jobs page shows meanwhile
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("{}" if filename.endswith(".json") else "x", encoding="utf-8")
        return str(target)

    monkeypatch.setattr("webapp.console.hf_download._probe", lambda endpoint: None)
    listing = SimpleNamespace(siblings=[SimpleNamespace(rfilename=f, size=None) for f in files])
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, **_: listing)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    job = ConsoleJob.objects.create(kind="hf_import", target="org/tiny-model")
    hf_import_run(job.pk)
    job.refresh_from_db()
    assert job.state == ConsoleJob.State.SUCCEEDED and job.progress == 1.0
    assert progress == [0.0, 1 / 4, 2 / 4, 3 / 4]  # pickles and READMEs are never fetched
    dest = model_root / "hf" / "org--tiny-model"
    fetched = sorted(p.name for p in dest.iterdir())
    assert fetched == ["chat_template.jinja", "config.json", "model.safetensors", "tokenizer.json"]
    row = ModelRegistration.objects.get(name="org/tiny-model")  # named as a model_id of it is served
    assert row.source == str(dest.resolve()) and row.aliases == ["tiny-model"]
    sync_manager()  # the web process registers what the worker recorded
    assert ("org/tiny-model", ("tiny-model",)) in {(i.name, tuple(i.aliases)) for i in manager.list()}


@pytest.mark.database
def test_repo_without_safetensors_is_refused(db: None, model_root: Path, monkeypatch: Any) -> None:
    import huggingface_hub

    monkeypatch.setattr("webapp.console.hf_download._probe", lambda endpoint: None)
    listing = SimpleNamespace(
        siblings=[SimpleNamespace(rfilename=f, size=2) for f in ("config.json", "x.bin")]
    )
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, **_: listing)
    job = ConsoleJob.objects.create(kind="hf_import", target="org/pickles")
    assert "no config.json and safetensors" in hf_import_run(job.pk)
    job.refresh_from_db()
    assert job.state == ConsoleJob.State.FAILED
