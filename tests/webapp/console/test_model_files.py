"""The models page lists the model files under the roots that no model uses yet, each with a one-click
Register; the first root is made at start when a new install lacks it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inference import ModelManager
from tests.webapp.console.test_uploads import write_gguf
from webapp.console.model_files import ensure_model_root, model_name_from, unregistered_models
from webapp.core.models import ModelRegistration
from webapp.serving.runtime import Runtime


def model_folder(path: Path, model_type: str = "llama") -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    (path / "model.safetensors").write_bytes(b"\0" * 16)
    return path


@pytest.fixture
def tree(model_root: Path, tmp_path: Path) -> Path:
    write_gguf(model_root / "Tiny Llama.Q8_0.gguf")
    model_folder(model_root / "hf" / "org--chat")
    model_folder(model_root / "vendor" / "minilm", model_type="bert")
    (model_root / "notes").mkdir()
    (model_root / "notes" / "readme.txt").write_text("not a model", encoding="utf-8")
    whole = write_gguf(tmp_path / "whole.gguf")
    (model_root / "broken.gguf").write_bytes(whole[:60])  # a download cut short
    (model_root / ".uploads").mkdir()
    (model_root / ".uploads" / "half.gguf").write_bytes(b"GGUF")  # hidden: an upload in progress
    outside = write_gguf(tmp_path / "outside.gguf")
    assert outside
    (model_root / "link.gguf").symlink_to(tmp_path / "outside.gguf")  # leads out of the root
    return model_root


@pytest.mark.database
def test_lists_unregistered_ggufs_and_folders(tree: Path, manager: ModelManager, db: None) -> None:
    ModelRegistration.objects.create(name="chat", source=str((tree / "hf" / "org--chat").resolve()))
    found = {item.shown: item for item in unregistered_models()}
    assert sorted(found) == ["Tiny Llama.Q8_0.gguf", "broken.gguf", "vendor/minilm"]
    tiny = found["Tiny Llama.Q8_0.gguf"]
    assert (tiny.kind, tiny.name, tiny.task, tiny.problem) == ("gguf", "Tiny-Llama.Q8_0", "generate", "")
    assert tiny.size_bytes == (tree / "Tiny Llama.Q8_0.gguf").stat().st_size
    assert (found["vendor/minilm"].kind, found["vendor/minilm"].task) == ("folder", "embed")
    assert found["broken.gguf"].problem == "broken.gguf is truncated"


def test_names_are_made_registrable_and_free() -> None:
    assert model_name_from("Qwen3 0.6B (Q4_K_M)", taken=set()) == "Qwen3-0.6B-Q4_K_M"
    assert model_name_from("base", taken={"base", "base-2"}) == "base-3"
    assert model_name_from("___", taken=set()) == "model"


@pytest.mark.database
def test_one_click_register_from_the_list(staff_client: Client, tree: Path, manager: ModelManager) -> None:
    page = staff_client.get(reverse("console:models")).content.decode()
    assert page.count('class="button model-file-register"') == 3  # not for the broken file
    path = str((tree / "vendor" / "minilm").resolve())
    response = staff_client.post(reverse("console:model-file-register"), {"path": path})
    assert response.status_code == 302 and response["Location"] == reverse("console:models")
    row = ModelRegistration.objects.get(name="minilm")
    assert row.source == path and row.task == "embed"
    assert "minilm" in {info.name for info in manager.list()}
    page = staff_client.get(reverse("console:models")).content.decode()
    assert "Registered minilm" in page and f'data-path="{path}"' not in page


@pytest.mark.database
def test_register_refuses_paths_outside_the_roots_and_broken_files(
    staff_client: Client, tree: Path, tmp_path: Path, manager: ModelManager
) -> None:
    for path in (str(tmp_path / "outside.gguf"), str(tree / "link.gguf"), str(tree / "broken.gguf"), "../x"):
        response = staff_client.post(reverse("console:model-file-register"), {"path": path}, follow=True)
        assert response.status_code == 200
        assert "message-error" in response.content.decode(), path
    assert not ModelRegistration.objects.exists()


def test_the_first_root_is_made_when_missing(settings: Any, tmp_path: Path) -> None:
    settings.MODEL_ROOTS = [tmp_path / "data" / "models", tmp_path / "elsewhere"]
    assert ensure_model_root() == tmp_path / "data" / "models"
    assert (tmp_path / "data" / "models").is_dir() and not (tmp_path / "elsewhere").exists()
    settings.MODEL_ROOTS = []
    assert ensure_model_root() is None


@pytest.mark.database
def test_server_start_makes_the_models_folder(
    manager: ModelManager, runtime: Runtime, transactional_db: None, settings: Any, tmp_path: Path
) -> None:
    settings.MODEL_ROOTS = [tmp_path / "fresh" / "models"]
    runtime.start(reap_interval=3600)
    runtime.threads[0].join(timeout=30)
    assert (tmp_path / "fresh" / "models").is_dir()
    runtime.stop()
