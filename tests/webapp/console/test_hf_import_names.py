"""The console's hub import names a model as mooncake.yaml's `model_id` of the same repo is served: the repo
id, its short name an alias (unless another model answers to it), so a client sends the same name whichever
way the model was added. A folder imported before under another name is never downloaded into again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from inference import EngineConfig, ModelManager
from webapp.console.hf_download import hf_import_run, model_name_for
from webapp.console.models import ConsoleJob
from webapp.console.registry import sync_manager
from webapp.core.model_list import listed_models
from webapp.core.model_names import MAX_NAME_CHARS
from webapp.core.models import ModelRegistration

FILES = ["config.json", "model.safetensors", "tokenizer.json"]


# The last is too long to record as a name: both are named by the short name then.
@pytest.mark.parametrize(
    "repo_id", ["HuggingFaceTB/SmolLM2-135M-Instruct", "org/tiny-model", f"{'o' * 20}/{'n' * 90}"]
)
def test_the_import_names_a_repo_as_a_model_id_of_it_is_named(repo_id: str) -> None:
    served = listed_models({"model": {"model_id": repo_id}})[0]
    assert model_name_for(repo_id) == served.name
    assert len(model_name_for(repo_id)) <= MAX_NAME_CHARS  # ModelRegistration.name holds it


def test_the_import_name_is_the_repo_id() -> None:
    assert model_name_for("org/tiny-model") == "org/tiny-model"
    assert model_name_for(f"{'o' * 20}/{'n' * 90}") == "n" * 90


@pytest.fixture
def hub(monkeypatch: Any) -> list[str]:
    """The hub's two calls, answered locally; returns the files each import downloaded."""
    import huggingface_hub

    fetched: list[str] = []

    def download(repo_id: str, filename: str, *, local_dir: Path, endpoint: str | None, **_: Any) -> str:
        fetched.append(filename)
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("{}" if filename.endswith(".json") else "new", encoding="utf-8")
        return str(target)

    monkeypatch.setattr("webapp.console.hf_download._probe", lambda endpoint: None)
    listing = SimpleNamespace(siblings=[SimpleNamespace(rfilename=f, size=None) for f in FILES])
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, **_: listing)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    return fetched


def _import(repo_id: str) -> ConsoleJob:
    job = ConsoleJob.objects.create(kind="hf_import", target=repo_id)
    hf_import_run(job.pk)
    job.refresh_from_db()
    return job


@pytest.mark.database
def test_an_import_answers_to_its_id_and_its_short_name(
    db: None, model_root: Path, manager: ModelManager, hub: list[str]
) -> None:
    assert _import("org/tiny-model").state == ConsoleJob.State.SUCCEEDED
    sync_manager()
    info = next(i for i in manager.list() if i.name == "org/tiny-model")
    assert list(info.aliases) == ["tiny-model"]


@pytest.mark.database
def test_a_short_name_taken_by_another_model_is_left_out(
    db: None, model_root: Path, manager: ModelManager, hub: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    manager.register("mine", EngineConfig(model="default"), aliases=["tiny-model"])
    sync_manager()  # records it, alias and all, as the server does at start
    assert _import("org/tiny-model").state == ConsoleJob.State.SUCCEEDED
    assert ModelRegistration.objects.get(name="org/tiny-model").aliases == []
    sync_manager()
    assert "org/tiny-model" in {i.name for i in manager.list()}
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.database
def test_a_repo_imported_under_its_short_name_is_not_downloaded_again(
    db: None, model_root: Path, hub: list[str]
) -> None:
    """An earlier version registered an import under the short name; the folder is that model's."""
    dest = model_root / "hf" / "org--tiny-model"
    dest.mkdir(parents=True)
    (dest / "model.safetensors").write_text("old", encoding="utf-8")
    ModelRegistration.objects.create(name="tiny-model", source=str(dest.resolve()))
    job = _import("org/tiny-model")
    assert job.state == ConsoleJob.State.FAILED
    assert "already imported" in job.message and "tiny-model" in job.message
    assert hub == [] and (dest / "model.safetensors").read_text(encoding="utf-8") == "old"
    assert list(ModelRegistration.objects.values_list("name", flat=True)) == ["tiny-model"]
