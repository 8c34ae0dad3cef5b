"""Chat model pickers offer chat models only: an embedding model (task "embed") is in neither the chat's
settings panel nor the header's picker, and a crafted form naming one gets an inline error, not a save."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.chat.fakes import FakeManager
from webapp.chat import selectors, services
from webapp.chat.forms import ModelForm, SettingsForm
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest

pytestmark = [pytest.mark.django_db, pytest.mark.database]
HTMX = {"HX-Request": "true"}
ENCODER = "mini-embedder"
SETTINGS = {"system_prompt": "", "temperature": "0.7", "top_p": "1", "max_tokens": "64"}


@pytest.fixture(autouse=True)
def with_an_embedding_model(fake_manager: FakeManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake's chat model, and beside it a loaded embedding model."""
    listed = fake_manager.list()
    encoder = SimpleNamespace(name=ENCODER, state="loaded", aliases=[], task="embed")
    monkeypatch.setattr(fake_manager, "list", lambda: [*listed, encoder])


@pytest.fixture
def signed_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def test_chat_models_leave_out_embedding_models(alice: User) -> None:
    every = {c.name for c in selectors.available_models(user_id=alice.pk)}
    assert every == {"fake-model", ENCODER}
    assert [c.name for c in selectors.chat_models(user_id=alice.pk)] == ["fake-model"]
    assert [c.name for c in selectors.picker_models(user_id=alice.pk)] == ["fake-model"]


def test_the_forms_refuse_an_embedding_model_by_name(alice: User) -> None:
    form = ModelForm({"model": ENCODER}, user_id=alice.pk)
    assert not form.is_valid()
    assert form.errors["model"] == [f"{ENCODER} is an embedding model: it cannot chat. Choose a chat model."]
    assert SettingsForm({"model": "fake-model", **SETTINGS}, user_id=alice.pk).is_valid()
    assert not SettingsForm({"model": ENCODER, **SETTINGS}, user_id=alice.pk).is_valid()


def test_the_services_refuse_an_embedding_model_too(chat: Conversation) -> None:
    with pytest.raises(InvalidRequest) as refused:
        services.conversation_set_model(conversation=chat, model=ENCODER)
    assert refused.value.param == "model"
    with pytest.raises(InvalidRequest):
        services.conversation_update_settings(
            conversation=chat, system_prompt="", model=ENCODER, temperature=0.7, top_p=1.0, max_tokens=64
        )
    chat.refresh_from_db()
    assert chat.model != ENCODER
    # A chat model still goes through.
    services.conversation_set_model(conversation=chat, model="fake-model")
    chat.refresh_from_db()
    assert chat.model == "fake-model"


def _options(html: str, select_id: str) -> str:
    return html.split(f'id="{select_id}"', 1)[1].split("</select>", 1)[0]


def test_neither_picker_on_the_chat_page_offers_it(signed_in: Client, chat: Conversation) -> None:
    html = signed_in.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    for picker in ("set-model", "model-select"):  # the settings panel, the header
        options = _options(html, picker)
        assert 'value="fake-model"' in options and ENCODER not in options


def test_a_crafted_settings_form_gets_an_inline_error(signed_in: Client, chat: Conversation) -> None:
    url = reverse("chat:settings", args=[chat.pk])
    response = signed_in.post(url, {"model": ENCODER, **SETTINGS}, headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="set-model-error"' in html and "is an embedding model" in html
    assert ENCODER not in _options(html, "set-model")
    chat.refresh_from_db()
    assert chat.model == "" and chat.max_tokens != 64  # nothing of the refused form was saved


def test_a_crafted_header_pick_gets_an_inline_error(signed_in: Client, chat: Conversation) -> None:
    response = signed_in.post(reverse("chat:model", args=[chat.pk]), {"model": ENCODER}, headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 400 and 'id="model-error"' in html and "is an embedding model" in html
    chat.refresh_from_db()
    assert chat.model == ""


def test_a_service_refusal_after_the_form_still_answers_inline(
    signed_in: Client, chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model became an embedding one between the form's check and the save: a 400, never a 500."""

    def refuse(**_: Any) -> None:
        raise InvalidRequest("gone", param="model")

    monkeypatch.setattr(services, "conversation_set_model", refuse)
    monkeypatch.setattr(services, "conversation_update_settings", refuse)
    picked = signed_in.post(reverse("chat:model", args=[chat.pk]), {"model": "fake-model"}, headers=HTMX)
    assert picked.status_code == 400 and "gone" in picked.content.decode()
    saved = signed_in.post(reverse("chat:settings", args=[chat.pk]), {"model": "fake-model", **SETTINGS})
    assert saved.status_code == 400 and 'id="set-model-error"' in saved.content.decode()
