"""Reply versions off the socket: export/import of the tree, the model picker, what the page shows per
message, the continuation prompt, and the migration that turns old chats into one-line trees."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.migrations import migrate_back_to, migrate_forward
from webapp.chat import selectors, services, transfer
from webapp.chat.models import Conversation, Message
from webapp.core.errors import InvalidRequest
from webapp.serving.prompts import render_continuation


def _tree(chat: Conversation) -> tuple[Message, Message, Message, Message]:
    """Q with replies A1 and A2 (A2 shown), and Q2 (a second version of Q) with reply B."""
    q = services.user_message_create(conversation=chat, content="Q")
    a1 = services.assistant_message_create(conversation=chat, parent=q, model="m", temperature=0.2)
    a2 = services.assistant_message_create(conversation=chat, parent=q, model="m")
    Message.objects.filter(pk__in=[a1.pk, a2.pk]).update(status="complete")
    Message.objects.filter(pk=a1.pk).update(content="Answer one")
    Message.objects.filter(pk=a2.pk).update(content="Answer two")
    q2 = services.user_message_edit(conversation=chat, message_id=q.pk, content="Q2")
    b = services.assistant_message_create(conversation=chat, parent=q2, model="m")
    Message.objects.filter(pk=b.pk).update(content="B", status="complete")
    services.branch_select(conversation=chat, message_id=q.pk)
    return q, a1, a2, b


def _contents(chat: Conversation) -> list[str]:
    return [m.content for m in selectors.active_path(conversation=chat)]


@pytest.mark.database
@pytest.mark.django_db
def test_export_import_keeps_the_tree_and_the_thread_on_screen(alice: User, chat: Conversation) -> None:
    _tree(chat)
    assert _contents(chat) == ["Q", "Answer two"]
    data = transfer.export_data(conversation=chat)
    assert data["version"] == 2 and data["active_path"] == [1, 3]
    assert [(m["id"], m["parent"]) for m in data["messages"]] == [
        (1, None),
        (2, 1),
        (3, 1),
        (4, None),
        (5, 4),
    ]
    assert data["messages"][1]["temperature"] == 0.2
    markdown = transfer.export_markdown(conversation=chat)
    assert "Answer two" in markdown and "Answer one" not in markdown and "Q2" not in markdown

    copy = transfer.import_chat(user=alice, raw=json.dumps(data).encode())
    assert _contents(copy) == ["Q", "Answer two"]
    rows = list(copy.messages.order_by("id"))
    assert [(m.content, m.parent.content if m.parent else None) for m in rows] == [
        ("Q", None),
        ("Q2", None),
        ("Answer one", "Q"),
        ("Answer two", "Q"),
        ("B", "Q2"),
    ]
    # Times survive the round trip.
    original = {m.content: m.created_at for m in chat.messages.all()}
    assert all(m.created_at == original[m.content] for m in rows)
    services.branch_select(conversation=copy, message_id=next(m.pk for m in rows if m.content == "Q2"))
    assert _contents(copy) == ["Q2", "B"]


@pytest.mark.database
@pytest.mark.django_db
def test_old_linear_exports_still_import(alice: User) -> None:
    raw = {
        "format": "mooncake.chat",
        "version": 1,
        "messages": [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "content": "three"},
        ],
    }
    chat = transfer.import_chat(user=alice, raw=json.dumps(raw).encode())
    assert _contents(chat) == ["one", "two", "three"]
    assert all(m.branch.count == 1 for m in selectors.active_path(conversation=chat))


def _export(messages: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"format": "mooncake.chat", "version": 2, "messages": messages, **extra}).encode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            _export(
                [
                    {"id": 1, "parent": 2, "role": "user", "content": "a"},
                    {"id": 2, "parent": 1, "role": "assistant", "content": "b"},
                ]
            ),
            "cycle",
        ),
        (_export([{"id": 1, "parent": 1, "role": "user", "content": "a"}]), "cycle"),
        (_export([{"id": 1, "parent": 9, "role": "user", "content": "a"}]), "not in it"),
        (
            _export([{"id": 1, "role": "user", "content": "a"}, {"id": 1, "role": "user", "content": "b"}]),
            "Two messages",
        ),
        (
            _export(
                [{"id": 1, "role": "user", "content": "a"}, {"parent": 1, "role": "user", "content": "b"}]
            ),
            "no id",
        ),
        (
            _export(
                [{"id": 1, "role": "user", "content": "a"}, {"id": 2, "role": "user", "content": "b"}],
                active_path=[1, 2],
            ),
            "active_path",
        ),
        (_export([{"id": 1, "role": "user", "content": "a"}], active_path=[7]), "active_path"),
        (_export([{"id": "x", "role": "user", "content": "a"}]), "Not a Mooncake chat export"),
        (_export([{"id": 1, "role": "user", "content": "a"}], active_path="1"), "Not a Mooncake chat export"),
        (_export([{"id": 1, "role": "user", "content": "a"}] * 5_001), "Not a Mooncake chat export"),
    ],
)
def test_bad_trees_are_refused_and_nothing_is_created(alice: User, raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        transfer.import_chat(user=alice, raw=raw)
    assert not Conversation.objects.exists() and not Message.objects.exists()


@pytest.mark.database
@pytest.mark.django_db
def test_bad_tree_upload_shows_the_reason(client: Client, alice: User) -> None:
    client.force_login(alice)
    bad = SimpleUploadedFile("chat.json", _export([{"id": 1, "parent": 1, "role": "user", "content": "a"}]))
    response = client.post(reverse("chat:import"), {"file": bad}, follow=True)
    assert response.status_code == 200 and "cycle" in response.content.decode()
    assert not Conversation.objects.filter(messages__isnull=False).exists()


@pytest.mark.database
@pytest.mark.django_db
def test_model_picker(client: Client, alice: User, chat: Conversation, fake_engine: FakeEngine) -> None:
    client.force_login(alice)
    page = client.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    assert 'id="model-picker"' in page and "fake-model · ready (default)" in page
    before = Conversation.objects.get(pk=chat.pk).updated_at
    url = reverse("chat:model", args=[chat.pk])
    response = client.post(url, {"model": "fake-model"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert '<option value="fake-model" selected>' in response.content.decode()
    chat.refresh_from_db()
    assert chat.model == "fake-model" and chat.updated_at == before
    bad = client.post(url, {"model": "no-such-model"}, HTTP_HX_REQUEST="true")
    assert bad.status_code == 400 and "Unknown model" in bad.content.decode()
    assert client.post(url, {"model": "x" * 500}).status_code == 400
    chat.refresh_from_db()
    assert chat.model == "fake-model"
    # Someone else's chat is a 404, and stays as it was.
    other = services.conversation_create(user=User.objects.create_user("bob"))
    assert client.post(reverse("chat:model", args=[other.pk]), {"model": ""}).status_code == 404
    assert client.get(url).status_code == 405


@pytest.mark.django_db
def test_picker_orders_ready_models_first_and_leaves_out_embedding_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    choices = [
        selectors.ModelChoice("b", "available"),
        selectors.ModelChoice("c", "loading"),
        selectors.ModelChoice("a", "failed"),
        selectors.ModelChoice("d", "loaded"),
        selectors.ModelChoice("e", "loaded", task="embed"),  # an embedding model does not chat
    ]
    monkeypatch.setattr(selectors, "available_models", lambda **_: choices)
    assert [(c.name, c.state_label) for c in selectors.picker_models(user_id=1)] == [
        ("d", "ready"),
        ("c", "loading…"),
        ("b", "not loaded (loads when picked)"),
        ("a", "unavailable: failed to load"),
    ]


@pytest.mark.database
@pytest.mark.django_db
def test_each_message_shows_its_time_model_and_settings(
    client: Client, alice: User, chat: Conversation
) -> None:
    client.force_login(alice)
    _tree(chat)
    services.branch_select(conversation=chat, message_id=Message.objects.get(content="Answer one").pk)
    html = client.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    assert html.count("<time datetime=") >= 2 and 'title="' in html
    assert "temperature 0.2 · top p" in html and '<span class="msg-model">m</span>' in html
    assert '<span class="branch-pos">1/2</span>' in html and '<span class="branch-pos">2/2</span>' not in html
    assert "Answer two" not in html.split('id="messages"')[1].split('</div>\n      <p class="chat-empty"')[0]


class _Template:
    """A ChatML-like engine: the turn ends with an end token and a newline, as SmolLM2's template does."""

    tokenizer = range(0x110000)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True, **_: Any
    ) -> list[int]:
        text = "".join(f"[{m['role']}]{m['content']}[end]\n" for m in messages)
        return [ord(c) for c in text + ("[assistant]" if add_generation_prompt else "")]


def test_continuation_prompt_ends_inside_the_assistant_turn() -> None:
    engine: Any = _Template()
    ids = render_continuation(engine, [{"role": "user", "content": "Hi"}], "Once upon")
    assert "".join(map(chr, ids)) == "[user]Hi[end]\n[assistant]Once upon"


def test_continuation_prompt_falls_back_to_the_generation_prompt_and_the_text() -> None:
    class Odd(_Template):
        def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
            # Renders an assistant message differently from its generation prompt.
            return super().apply_chat_template([dict(m, role=m["role"].upper()) for m in messages], **kwargs)

    class Tok:
        def encode(self, text: str) -> list[int]:
            return [ord(c) for c in text]

    engine: Any = Odd()
    engine.tokenizer = Tok()
    ids = render_continuation(engine, [{"role": "user", "content": "Hi"}], "Once")
    assert "".join(map(chr, ids)) == "[USER]Hi[end]\n[assistant]Once"


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
def test_migration_links_old_chats_into_one_line() -> None:
    apps = migrate_back_to([("chat", "0002_reply_lease")])
    user = apps.get_model("auth", "User").objects.create(username="old")
    old = apps.get_model("chat", "Conversation").objects.create(user=user)
    ids = [
        apps.get_model("chat", "Message").objects.create(conversation=old, role=role, content=str(i)).pk
        for i, role in enumerate(["user", "assistant", "user", "assistant"])
    ]
    migrate_forward()
    chat = Conversation.objects.get(pk=old.pk)
    assert chat.active_root_id == ids[0]
    assert [m.pk for m in selectors.active_path(conversation=chat)] == ids
    assert [m.parent_id for m in Message.objects.order_by("id")] == [None, *ids[:-1]]
