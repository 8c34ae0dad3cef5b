"""A model served under its hub id (org/name, as mooncake.yaml's `model_id` names it) is shown and acted on
by the console under that id: the Models page renders its buttons, and load, unload and default reach it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from inference import EngineConfig, ModelManager
from webapp.console.registry import sync_manager
from webapp.serving.runtime import get_runtime

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
HTMX = {"HX-Request": "true"}

pytestmark = pytest.mark.database


def _state(manager: ModelManager) -> str:
    return next(i.state for i in manager.list() if i.name == HUB_ID)


def test_the_models_page_acts_on_a_model_named_by_its_hub_id(
    staff_client: Client, manager: ModelManager
) -> None:
    manager.register(HUB_ID, EngineConfig(model="default"), aliases=["SmolLM2-135M-Instruct"])
    sync_manager()  # as the server does on start
    page = staff_client.get(reverse("console:models"))
    assert page.status_code == 200
    load = reverse("console:model-load", args=[HUB_ID])
    assert load == f"/console/models/{HUB_ID}/load/" and f'hx-post="{load}"' in page.content.decode()
    assert staff_client.post(load, headers=HTMX).status_code == 200
    get_runtime().jobs.wait_all()
    assert _state(manager) == "loaded"
    staff_client.post(reverse("console:model-default", args=[HUB_ID]), headers=HTMX)
    assert manager.default_name == HUB_ID
    staff_client.post(reverse("console:model-unload", args=[HUB_ID]), headers=HTMX)
    get_runtime().jobs.wait_all()
    assert _state(manager) == "available"
