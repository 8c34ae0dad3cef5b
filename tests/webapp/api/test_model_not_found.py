"""The 404 for a model the caller cannot use names the ids they may use, and only those: a restricted model
is named to its groups' members and to admins, never to anyone else, whose answer for it reads as for a
model that does not exist. Models served under a hub id answer to it, slash and all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.services import api_key_create
from webapp.core.models import ModelRegistration
from webapp.serving.model_access import restrictions_changed
from webapp.serving.runtime import get_runtime

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SHORT = "SmolLM2-135M-Instruct"


@pytest.fixture
def models() -> Iterator[FakeModelManager]:
    manager = FakeModelManager.with_engine(FakeEngine(model_name=HUB_ID), aliases=[SHORT, "default"])
    manager.register("secret", None, aliases=["hush"])
    manager.attach("secret", FakeEngine(model_name="secret"))
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().install_manager(None)
    restrictions_changed()  # the restrictions this test made are gone with its database


@pytest.fixture
def keys(settings: Any) -> dict[str, str]:
    settings.MOONCAKE_API_AUTH = "required"
    research = Group.objects.create(name="research")
    row = ModelRegistration.objects.create(name="secret", source="default", restricted=True)
    row.allowed_groups.add(research)
    restrictions_changed()
    member = User.objects.create_user("member", password="pw-member-1")
    member.groups.add(research)
    outsider = User.objects.create_user("outsider", password="pw-outsider-1")
    return {
        "member": api_key_create(user=member, name="m").secret,
        "outsider": api_key_create(user=outsider, name="o").secret,
    }


async def _not_found(client: AsyncClient, model: str, secret: str) -> list[str]:
    """The 404 messages for `model` from every route that takes one."""
    headers = {"Authorization": f"Bearer {secret}"}
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    responses = [
        await post_json(client, "/v1/chat/completions", chat, **headers),
        await post_json(client, "/v1/chat/completions", {**chat, "stream": True}, **headers),
        await post_json(client, "/v1/completions", {"model": model, "prompt": "x"}, **headers),
        await client.get(f"/v1/models/{model}", headers=headers),
        await post_json(client, "/tokenize", {"model": model, "prompt": "x"}, **headers),
        await post_json(client, "/detokenize", {"model": model, "tokens": [1]}, **headers),
    ]
    messages = []
    for response in responses:
        assert response.status_code == 404, response.content
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("model_not_found", "model")
        assert error["type"] == "not_found_error"
        messages.append(error["message"])
    return messages


async def test_the_404_names_the_models_the_caller_may_use(models: Any, keys: Any) -> None:
    client = AsyncClient()
    expected = f"The model 'nope' does not exist. Models you may use: {HUB_ID}, secret."
    assert await _not_found(client, "nope", keys["member"]) == [expected] * 6


async def test_a_restricted_model_is_neither_named_nor_told_apart_from_a_missing_one(
    models: Any, keys: Any
) -> None:
    client = AsyncClient()
    for asked in ("nope", "secret", "hush"):
        messages = await _not_found(client, asked, keys["outsider"])
        assert messages == [f"The model {asked!r} does not exist. Models you may use: {HUB_ID}."] * 6


@pytest.fixture
def all_restricted() -> None:
    for name in (HUB_ID, "secret"):
        ModelRegistration.objects.create(name=name, source="default", restricted=True)
    restrictions_changed()


async def test_with_nothing_usable_the_404_says_so(models: Any, all_restricted: None, settings: Any) -> None:
    settings.MOONCAKE_API_AUTH = "off"
    response = await AsyncClient().get("/v1/models/nope")
    message = response.json()["error"]["message"]
    assert message == "The model 'nope' does not exist. No model is available to you."


async def test_a_model_answers_to_its_hub_id_and_its_short_name(models: Any, settings: Any) -> None:
    settings.MOONCAKE_API_AUTH = "off"
    client = AsyncClient()
    for asked in (HUB_ID, SHORT):
        body = {"model": asked, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        reply = await post_json(client, "/v1/chat/completions", body)
        assert reply.status_code == 200 and reply.json()["model"] == asked, reply.content
        card = await client.get(f"/v1/models/{asked}")
        assert card.status_code == 200 and card.json()["id"] == HUB_ID, card.content
    listed = (await client.get("/v1/models")).json()["data"]
    assert (listed[0]["id"], listed[0]["aliases"]) == (HUB_ID, [SHORT, "default"])
