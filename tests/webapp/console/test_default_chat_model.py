"""The console's "Make default" picks the model chats use: an embedding model is not offered it, and a
crafted request for one is refused with the reason in the table."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from inference import ModelManager
from tests.webapp.console.test_models import register
from webapp.console import lifecycle
from webapp.console.models import AuditLog
from webapp.core.errors import InvalidRequest

HTMX = {"HX-Request": "true"}


@pytest.mark.database
def test_an_embedding_model_cannot_be_the_default(
    staff_client: Client, manager: ModelManager, model_root: Path
) -> None:
    assert register(staff_client, model_root, "encoder", task="embed").status_code == 302
    assert register(staff_client, model_root, "chatty").status_code == 302
    table = staff_client.get(reverse("console:models-table")).content.decode()
    assert reverse("console:model-default", args=["chatty"]) in table
    assert reverse("console:model-default", args=["encoder"]) not in table

    with pytest.raises(InvalidRequest):
        lifecycle.model_set_default(name="encoder")
    response = staff_client.post(reverse("console:model-default", args=["encoder"]), headers=HTMX)
    assert response.status_code == 200 and "encoder is an embedding model" in response.content.decode()
    assert manager.default_name != "encoder"
    assert not AuditLog.objects.filter(action="model.set_default").exists()

    staff_client.post(reverse("console:model-default", args=["chatty"]), headers=HTMX)
    assert manager.default_name == "chatty"
