"""Upgrading an install whose mooncake.yaml names its model by hub id: the model used to be served under the
repository's short name and is now served under the id (the short name an alias). The console's record of
it, kept under the short name, is renamed to the id at start, so its group restriction and defaults still
apply; it is never left behind while an unrestricted record appears under the new name."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.test import AsyncClient

from inference import EngineConfig, ModelManager
from tests.webapp.api.conftest import post_json
from webapp.accounts.services import api_key_create
from webapp.console.registry import sync_manager
from webapp.core.models import ModelRegistration
from webapp.serving.model_access import restrictions_changed

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SHORT = "SmolLM2-135M-Instruct"


@pytest.fixture
def old_record(settings: Any) -> Iterator[ModelRegistration]:
    """The record an earlier version made for the yaml's model, restricted and given defaults since."""
    settings.MOONCAKE = {**settings.MOONCAKE, "model": {"model_id": HUB_ID}}
    settings.MOONCAKE_API_AUTH = "required"
    row = ModelRegistration.objects.create(
        name=SHORT,
        source="default",
        builtin=True,
        restricted=True,
        system_prompt="Answer briefly.",
        sampling_defaults={"temperature": 0.2},
        keep_alive_seconds=600,
        is_default=True,
        state_revision=3,
    )
    row.allowed_groups.add(Group.objects.create(name="research"))
    restrictions_changed()  # as the Groups page does; nothing read before this test is kept
    yield row
    restrictions_changed()  # nor after: its restrictions are gone with its database


@pytest.fixture
def secrets(old_record: ModelRegistration) -> dict[str, str]:
    member = User.objects.create_user("member", password="pw-member-1")
    member.groups.add(Group.objects.get(name="research"))
    outsider = User.objects.create_user("outsider", password="pw-outsider-1")
    return {
        "member": api_key_create(user=member, name="m").secret,
        "outsider": api_key_create(user=outsider, name="o").secret,
    }


def _start(manager: ModelManager) -> None:
    """What the upgraded server does at start: the yaml's model under its id, then the console's sync."""
    manager.register(HUB_ID, EngineConfig(model="default"), aliases=[SHORT])
    sync_manager()


def test_the_old_record_is_renamed_keeping_its_settings(
    manager: ModelManager, old_record: ModelRegistration, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="webapp.console.registry"):
        _start(manager)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    renamed = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(renamed) == 1 and SHORT in renamed[0] and HUB_ID in renamed[0]
    # The fixture's other model ("base") is recorded beside it, as any served model is.
    assert set(ModelRegistration.objects.values_list("name", flat=True)) == {HUB_ID, "base"}
    row = ModelRegistration.objects.get(name=HUB_ID)
    assert row.pk == old_record.pk and row.created_at == old_record.created_at
    assert row.restricted and list(row.allowed_groups.values_list("name", flat=True)) == ["research"]
    assert (row.system_prompt, row.sampling_defaults, row.keep_alive_seconds) == (
        "Answer briefly.",
        {"temperature": 0.2},
        600,
    )
    assert row.builtin and row.is_default and row.state_revision == 3
    assert row.aliases == [SHORT]  # what the manager serves it under now, as a new record would have
    # A second start finds it in place: nothing to rename, nothing logged.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="webapp.console.registry"):
        sync_manager()
    assert caplog.records == []
    assert set(ModelRegistration.objects.values_list("name", flat=True)) == {HUB_ID, "base"}


async def test_the_restriction_still_holds_through_the_api(
    manager: ModelManager, secrets: dict[str, str]
) -> None:
    client = AsyncClient()
    outsider = {"Authorization": f"Bearer {secrets['outsider']}"}
    # A request before the sync caches the restrictions: the rename must not wait for them to expire.
    assert (await client.get("/v1/models", headers=outsider)).status_code == 200
    await sync_to_async(_start)(manager)
    listed = await client.get("/v1/models", headers=outsider)
    assert listed.status_code == 200
    assert {m["id"] for m in listed.json()["data"]} == {"base"}
    for name in (HUB_ID, SHORT):
        chat = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
        response = await post_json(client, "/v1/chat/completions", chat, **outsider)
        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] == "model_not_found"
    member = {"Authorization": f"Bearer {secrets['member']}"}
    listed = await client.get("/v1/models", headers=member)
    assert {m["id"] for m in listed.json()["data"]} == {"base", HUB_ID}


def test_an_admin_record_under_the_alias_is_left_alone(manager: ModelManager, settings: Any) -> None:
    """Only a record the server made from mooncake.yaml is the yaml's model; an admin's is their own."""
    settings.MOONCAKE = {**settings.MOONCAKE, "model": {"model_id": HUB_ID}}
    ModelRegistration.objects.create(name=SHORT, source="default", restricted=True)
    _start(manager)
    assert not ModelRegistration.objects.get(name=SHORT).builtin
    assert set(ModelRegistration.objects.values_list("name", flat=True)) == {SHORT, HUB_ID, "base"}
