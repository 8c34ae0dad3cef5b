"""The default-model setting offers chat models only: an embedding model (task "embed") is not in the list,
a crafted form naming one is refused by the field, and one stored before is not given to new chats."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.chat import services as chat_services
from webapp.core.errors import InvalidRequest
from webapp.preferences import selectors, services
from webapp.preferences.forms import DefaultsForm
from webapp.preferences.models import UserDefaults

pytestmark = [pytest.mark.django_db, pytest.mark.database]
ENCODER = "mini-embedder"
BLANK = {"system_prompt": "", "temperature": "", "top_p": "", "max_tokens": ""}


@pytest.fixture
def manager(fake_manager: Any) -> Any:
    """The fake's chat model ("fake-model") and a registered embedding model."""
    fake_manager.register(ENCODER, None).task = "embed"
    return fake_manager


@pytest.fixture
def alice(client: Client) -> User:
    user = User.objects.create_user("alice", password="pw")
    client.force_login(user)
    return user


def test_the_options_are_chat_models(manager: Any, alice: User) -> None:
    assert [o.name for o in selectors.model_options(user=alice)] == ["fake-model"]
    assert selectors.embedding_model_names(user=alice) == {ENCODER}


def test_form_and_service_refuse_an_embedding_model(manager: Any, alice: User) -> None:
    form = DefaultsForm({"model": ENCODER, **BLANK}, user=alice)
    assert not form.is_valid() and "is an embedding model" in form.errors["model"][0]
    assert DefaultsForm({"model": "fake-model", **BLANK}, user=alice).is_valid()
    with pytest.raises(InvalidRequest) as refused:
        services.defaults_update(
            user=alice, model=ENCODER, system_prompt="", temperature=None, top_p=None, max_tokens=None
        )
    assert refused.value.param == "model"
    assert not UserDefaults.objects.filter(user=alice).exists()


def test_the_page_does_not_offer_it(client: Client, manager: Any, alice: User) -> None:
    html = client.get("/settings/").content.decode()
    options = html.split('id="def-model"', 1)[1].split("</select>", 1)[0]
    assert 'value="fake-model"' in options and ENCODER not in options


def test_a_crafted_post_gets_an_inline_error(client: Client, manager: Any, alice: User) -> None:
    response = client.post("/settings/defaults/", {"model": ENCODER, **BLANK})
    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="def-model-error"' in html and f"{ENCODER} is an embedding model" in html
    assert not UserDefaults.objects.filter(user=alice).exists()


def test_one_stored_before_falls_back_to_the_servers(manager: Any, alice: User) -> None:
    UserDefaults.objects.create(user=alice, model=ENCODER)  # saved before this check existed
    assert chat_services.conversation_create(user=alice).model == ""
