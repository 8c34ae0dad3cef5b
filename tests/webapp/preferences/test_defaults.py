"""Per-user defaults: validation with the chat's ranges, inline errors, and new chats inheriting them."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.chat import services as chat_services
from webapp.chat.models import Conversation, Message
from webapp.core.errors import InvalidRequest
from webapp.preferences import services
from webapp.preferences.models import UserDefaults

pytestmark = pytest.mark.django_db
URL = "/settings/defaults/"


@pytest.fixture
def alice(client: Client) -> User:
    user = User.objects.create_user("alice", password="pw")
    client.force_login(user)
    return user


def post(client: Client, **fields: Any) -> Any:
    data = {"model": "", "system_prompt": "", "temperature": "", "top_p": "", "max_tokens": ""}
    data.update({k: str(v) for k, v in fields.items()})
    return client.post(URL, data)


def test_routes() -> None:
    assert reverse("preferences:settings") == "/settings/"
    assert reverse("preferences:defaults") == URL
    assert reverse("preferences:prompt-library") == "/prompts/library.json"


def test_settings_page_needs_login(client: Client) -> None:
    User.objects.create_user("someone", password="pw")  # past first-run setup
    response = client.get("/settings/")
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert client.get("/prompts/library.json").status_code == 302


@pytest.mark.database
def test_new_chat_without_defaults_has_the_servers(alice: User) -> None:
    chat = chat_services.conversation_create(user=alice)
    assert (chat.system_prompt, chat.temperature, chat.top_p, chat.max_tokens) == ("", 0.7, 1.0, 512)


@pytest.mark.database
def test_saved_defaults_reach_new_chats(client: Client, alice: User) -> None:
    response = post(client, system_prompt="  Answer in French.  ", temperature=0.3, max_tokens=77)
    assert response.status_code == 302 and response["Location"] == "/settings/"
    stored = UserDefaults.objects.get(user=alice)
    assert (stored.system_prompt, stored.temperature, stored.top_p, stored.max_tokens) == (
        "Answer in French.",
        0.3,
        None,
        77,
    )
    chat = chat_services.conversation_create(user=alice)
    assert chat.system_prompt == "Answer in French."
    assert (chat.temperature, chat.max_tokens) == (0.3, 77)
    assert chat.top_p == 1.0  # left empty: the server's default
    # Someone else's new chats are not affected.
    bob = User.objects.create_user("bob", password="pw")
    assert chat_services.conversation_create(user=bob).system_prompt == ""


@pytest.mark.database
def test_the_page_shows_stored_defaults(client: Client, alice: User) -> None:
    services.defaults_update(
        user=alice, model="", system_prompt="Be terse.", temperature=1.5, top_p=0.9, max_tokens=100
    )
    html = client.get("/settings/").content.decode()
    assert ">Be terse.</textarea>" in html
    assert 'value="1.5"' in html and 'value="0.9"' in html and 'value="100"' in html
    assert "Reset to server defaults" in html


@pytest.mark.database
def test_new_chat_button_reuses_the_empty_chat_with_the_new_defaults(client: Client, alice: User) -> None:
    draft = chat_services.conversation_new(user=alice)
    used = chat_services.conversation_create(user=alice)
    Message.objects.create(conversation=used, role="user", content="hi")
    post(client, system_prompt="Be brief.", temperature=0.2)
    draft.refresh_from_db()
    used.refresh_from_db()
    assert (draft.system_prompt, draft.temperature, draft.max_tokens) == ("Be brief.", 0.2, 512)
    assert (used.system_prompt, used.temperature) == ("", 0.7)  # a chat with messages keeps its own
    assert chat_services.conversation_new(user=alice).pk == draft.pk


@pytest.mark.database
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", "2.5", "less than or equal to 2"),
        ("temperature", "-1", "greater than or equal to 0"),
        ("temperature", "hot", "Enter a number"),
        ("temperature", "nan", "Enter a number"),
        ("top_p", "0", "Must be above 0.0 and at most 1.0"),
        ("max_tokens", "0", "greater than or equal to 1"),
        ("max_tokens", "40000", "less than or equal to 32768"),
        ("max_tokens", "1.5", "Enter a whole number"),
        ("system_prompt", "x" * 32_001, "at most 32000 characters"),
    ],
)
def test_bad_values_come_back_inline_and_store_nothing(
    client: Client, alice: User, field: str, value: str, message: str
) -> None:
    response = post(client, **{field: value})
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html
    assert 'aria-invalid="true"' in html and "Not saved" in html
    assert not UserDefaults.objects.filter(user=alice).exists()


@pytest.mark.database
def test_unknown_model_is_refused(client: Client, alice: User, fake_manager: Any) -> None:
    response = post(client, model="no-such-model")
    assert response.status_code == 400
    assert "Unknown model" in response.content.decode()
    assert post(client, model="fake-model").status_code == 302
    assert chat_services.conversation_create(user=alice).model == "fake-model"


def test_the_service_checks_ranges_itself(alice: User) -> None:
    with pytest.raises(InvalidRequest, match="temperature"):
        services.defaults_update(
            user=alice, model="", system_prompt="", temperature=9.0, top_p=None, max_tokens=None
        )
    with pytest.raises(InvalidRequest, match="max_tokens"):
        services.defaults_update(
            user=alice, model="", system_prompt="", temperature=None, top_p=None, max_tokens=0
        )
    assert not UserDefaults.objects.exists()


@pytest.mark.database
def test_reset_returns_to_the_server_defaults(client: Client, alice: User) -> None:
    post(client, temperature=0.1)
    assert client.post("/settings/defaults/reset/").status_code == 302
    assert not UserDefaults.objects.filter(user=alice).exists()
    assert chat_services.conversation_create(user=alice).temperature == 0.7


def test_get_is_not_allowed_on_the_write_endpoints(client: Client, alice: User) -> None:
    assert client.get(URL).status_code == 405
    assert client.get("/settings/defaults/reset/").status_code == 405
    assert Conversation.objects.count() == 0


@pytest.mark.database
def test_a_model_removed_since_falls_back_to_the_servers(
    client: Client, alice: User, fake_manager: Any
) -> None:
    services.defaults_update(
        user=alice, model="fake-model", system_prompt="", temperature=None, top_p=None, max_tokens=None
    )
    assert chat_services.conversation_create(user=alice).model == "fake-model"
    UserDefaults.objects.filter(user=alice).update(model="gone-model")
    assert chat_services.conversation_create(user=alice).model == ""
    # The settings page still shows the stale choice, marked, rather than silently showing the default.
    assert "gone-model · no longer available" in client.get("/settings/").content.decode()
