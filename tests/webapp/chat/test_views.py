"""HTTP pages and htmx fragments, including that one user can never reach another's chat."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from tests.webapp.chat.fakes import FakeEngine
from webapp.chat import services
from webapp.chat.models import Conversation, Message

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def alice(client: Client) -> User:
    user = User.objects.create_user("alice", password="pw")
    client.force_login(user)
    return user


@pytest.fixture
def chat(alice: User) -> Conversation:
    conversation = services.conversation_create(user=alice)
    services.user_message_create(conversation=conversation, content="What is <b>2+2</b>?")
    Message.objects.create(
        conversation=conversation,
        role="assistant",
        content="It is **4**.\n\n```python\nprint(2 + 2)\n```\n<script>alert(1)</script>",
        completion_tokens=12,
        prompt_tokens=30,
        tokens_per_second=41.5,
        finish_reason="stop",
    )
    return conversation


@pytest.fixture
def bobs_chat() -> Conversation:
    bob = User.objects.create_user("bob", password="pw")
    conversation = services.conversation_create(user=bob)
    services.user_message_create(conversation=conversation, content="bob private text")
    return services.conversation_rename(conversation=conversation, title="Bob's secret")


def test_login_required(client: Client) -> None:
    User.objects.create_user("someone", password="pw")  # Otherwise first-run setup takes over.
    response = client.get(reverse("chat:index"))
    assert response.status_code == 302 and "login" in response["Location"]


@pytest.mark.database
def test_index_only_reads(client: Client, alice: User) -> None:
    start = client.get(reverse("chat:index"))
    assert start.status_code == 200 and not Conversation.objects.exists()
    assert f'action="{reverse("chat:new")}"' in start.content.decode()
    created = client.post(reverse("chat:new"))
    again = client.get(reverse("chat:index"))
    assert created.status_code == again.status_code == 302
    assert created["Location"] == again["Location"]
    assert client.post(reverse("chat:new"))["Location"] == created["Location"]  # one draft, reused
    assert Conversation.objects.filter(user=alice).count() == 1


@pytest.mark.database
def test_detail_renders_markdown_safely(client: Client, chat: Conversation, fake_engine: FakeEngine) -> None:
    html = client.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    assert "<strong>4</strong>" in html
    assert 'class="copy-btn"' in html and '<span class="nb">print</span>' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert "What is &lt;b&gt;2+2&lt;/b&gt;?" in html
    assert "12 tokens · prompt 30 · 41.5 tok/s" in html
    assert f'data-ws-path="/ws/chat/{chat.pk}/"' in html
    assert "fake-model · ready" in html  # The model switcher lists the manager's models.


@pytest.mark.database
def test_detail_shows_replies_left_streaming_as_stopped(client: Client, chat: Conversation) -> None:
    orphan = Message.objects.create(conversation=chat, role="assistant", status="streaming", content="half")
    html = client.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    assert f'id="msg-{orphan.pk}"' in html and "status-streaming" not in html and "status-stopped" in html
    orphan.refresh_from_db()
    assert orphan.status == "streaming"  # a GET only reads


@pytest.mark.database
def test_list_search_and_pagination(client: Client, alice: User) -> None:
    for i in range(35):
        c = services.conversation_create(user=alice)
        services.user_message_create(conversation=c, content="needle" if i == 3 else f"hay {i}")
        services.conversation_rename(conversation=c, title=f"chat {i}")
    services.conversation_create(user=alice, title="empty draft")
    page1 = client.get(reverse("chat:list")).content.decode()
    assert page1.count('class="conv-item') == 30 and "chat 34" in page1 and "empty draft" not in page1
    assert 'hx-trigger="intersect once"' in page1
    page2 = client.get(reverse("chat:list"), {"page": 2}).content.decode()
    assert page2.count('class="conv-item') == 5 and "intersect" not in page2
    found = client.get(reverse("chat:list"), {"q": "needle"}).content.decode()
    assert found.count('class="conv-item') == 1 and "chat 3<" in found
    by_title = client.get(reverse("chat:list"), {"q": "chat 1"}).content.decode()
    assert by_title.count('class="conv-item') == 11
    none = client.get(reverse("chat:list"), {"q": "zzz"}).content.decode()
    assert "No chats match" in none


@pytest.mark.database
def test_rename(client: Client, chat: Conversation) -> None:
    url = reverse("chat:rename", args=[chat.pk])
    response = client.post(url, {"title": "  Maths  homework "}, headers=HTMX)
    assert response.status_code == 200 and 'hx-swap-oob="true"' in response.content.decode()
    chat.refresh_from_db()
    assert (chat.title, chat.title_is_custom) == ("Maths homework", True)
    assert client.post(url, {"title": " "}, headers=HTMX).status_code == 400


@pytest.mark.database
def test_rename_without_the_script_returns_to_the_chat(client: Client, chat: Conversation) -> None:
    url = reverse("chat:rename", args=[chat.pk])
    response = client.post(url, {"title": "Plain form"})
    assert response.status_code == 302 and response["Location"] == reverse("chat:detail", args=[chat.pk])
    chat.refresh_from_db()
    assert chat.title == "Plain form"
    refused = client.post(url, {"title": ""}, follow=True)
    assert "The title cannot be blank." in refused.content.decode()


@pytest.mark.database
def test_delete(client: Client, chat: Conversation) -> None:
    url = reverse("chat:detail", args=[chat.pk])
    response = client.post(
        reverse("chat:delete", args=[chat.pk]),
        headers={"HX-Request": "true", "HX-Current-URL": f"http://t{url}"},
    )
    assert response["HX-Redirect"] == reverse("chat:index")
    assert not Conversation.objects.filter(pk=chat.pk).exists()
    assert not Message.objects.exists()


@pytest.mark.database
def test_delete_from_sidebar_stays(client: Client, chat: Conversation) -> None:
    response = client.post(reverse("chat:delete", args=[chat.pk]), headers={"HX-Request": "true"})
    assert response.status_code == 200 and "HX-Redirect" not in response


@pytest.mark.database
def test_settings(client: Client, chat: Conversation, fake_engine: FakeEngine) -> None:
    url = reverse("chat:settings", args=[chat.pk])
    data = {
        "system_prompt": "Pirate.",
        "model": "fake-model",
        "temperature": "0.3",
        "top_p": "0.8",
        "max_tokens": "64",
    }
    response = client.post(url, data)
    assert response.status_code == 200 and "Saved" in response.content.decode()
    chat.refresh_from_db()
    assert (chat.system_prompt, chat.model, chat.temperature, chat.top_p, chat.max_tokens) == (
        "Pirate.",
        "fake-model",
        0.3,
        0.8,
        64,
    )
    bad = client.post(url, {**data, "temperature": "5", "model": "nope"})
    assert bad.status_code == 400 and "Unknown model" in bad.content.decode()
    assert 'value="5"' in bad.content.decode()


@pytest.mark.database
def test_export_and_import_round_trip(client: Client, chat: Conversation, alice: User) -> None:
    exported = client.get(reverse("chat:export_json", args=[chat.pk]))
    assert exported["Content-Disposition"].endswith('.json"')
    data = json.loads(exported.content)
    assert data["format"] == "mooncake.chat" and len(data["messages"]) == 2
    md = client.get(reverse("chat:export_markdown", args=[chat.pk])).content.decode()
    assert "## User\n\nWhat is <b>2+2</b>?" in md and "It is **4**." in md
    upload = SimpleUploadedFile("chat.json", exported.content, content_type="application/json")
    response = client.post(reverse("chat:import"), {"file": upload})
    imported = Conversation.objects.exclude(pk=chat.pk).get(user=alice)
    assert response["Location"] == reverse("chat:detail", args=[imported.pk])
    assert [(m.role, m.content) for m in imported.messages.all()] == [
        (m.role, m.content) for m in chat.messages.all()
    ]


@pytest.mark.database
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not valid JSON"),
        (b'{"format": "other"}', "format"),
        (b'{"messages": []}', "no messages"),
    ],
)
def test_import_rejects_bad_files(client: Client, alice: User, body: bytes, reason: str) -> None:
    upload = SimpleUploadedFile("chat.json", body, content_type="application/json")
    response = client.post(reverse("chat:import"), {"file": upload}, follow=True)
    assert reason in response.content.decode()
    assert not Message.objects.exists()


@pytest.mark.database
@pytest.mark.parametrize(
    ("name", "method"),
    [
        ("chat:detail", "get"),
        ("chat:export_json", "get"),
        ("chat:export_markdown", "get"),
        ("chat:rename", "post"),
        ("chat:delete", "post"),
        ("chat:settings", "post"),
    ],
)
def test_other_users_chat_is_404(
    client: Client, alice: User, bobs_chat: Conversation, name: str, method: str
) -> None:
    url = reverse(name, args=[bobs_chat.pk])
    data = {"title": "x", "temperature": "1", "top_p": "1", "max_tokens": "5"}
    response = getattr(client, method)(url, data) if method == "post" else client.get(url)
    assert response.status_code == 404
    bobs_chat.refresh_from_db()
    assert bobs_chat.title == "Bob's secret"


@pytest.mark.database
def test_other_users_chats_never_listed(client: Client, alice: User, bobs_chat: Conversation) -> None:
    assert "Bob" not in client.get(reverse("chat:list"), {"q": "bob"}).content.decode()
    page = client.post(reverse("chat:new"), follow=True).content.decode()
    assert "Bob&#x27;s secret" not in page and "bob private text" not in page


@pytest.mark.database
def test_rename_refuses_a_blank_title_with_a_message(client: Client, chat: Conversation) -> None:
    services.conversation_rename(conversation=chat, title="Kept")
    response = client.post(reverse("chat:rename", args=[chat.pk]), {"title": "   "}, headers=HTMX)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="title-error"' in html and "blank" in html
    assert 'value="Kept"' in html  # The stored title is back in the field.
    assert "{#" not in html and "comment %}" not in html  # Template comments never reach the page.
    chat.refresh_from_db()
    assert chat.title == "Kept"


@pytest.mark.database
def test_rename_tells_every_open_tab(
    client: Client, chat: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, tuple[dict[str, object], ...]]] = []

    async def record(conversation_id: int, *payloads: dict[str, object]) -> None:
        sent.append((conversation_id, payloads))

    monkeypatch.setattr("webapp.chat.events.broadcast", record)
    client.post(reverse("chat:rename", args=[chat.pk]), {"title": "Trip  plans"}, headers=HTMX)
    assert sent == [(chat.pk, ({"type": "title", "title": "Trip plans"},))]


@pytest.mark.database
def test_settings_errors_are_shown_by_their_fields(client: Client, chat: Conversation) -> None:
    url = reverse("chat:settings", args=[chat.pk])
    data = {"model": "", "system_prompt": "", "temperature": "", "top_p": "0.9", "max_tokens": "64"}
    response = client.post(url, data)
    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="set-temperature-error"' in html and "This field is required." in html
    assert 'aria-describedby="set-temperature-error"' in html and 'aria-invalid="true"' in html
    assert "Saved" not in html and "{#" not in html and "comment %}" not in html
    assert html.count('aria-invalid="true"') == 1  # Only the field that is wrong.
