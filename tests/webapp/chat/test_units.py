"""Markdown rendering, titles, defaults and the write-side rules."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from webapp.chat import selectors, services
from webapp.chat.markdown import render_markdown
from webapp.chat.titles import clean_title
from webapp.core.errors import InvalidRequest


@pytest.mark.parametrize(
    ("source", "present", "absent"),
    [
        ("<script>alert(1)</script>", "&lt;script&gt;", "<script"),
        ('<img src=x onerror="alert(1)">', "&lt;img", "<img"),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))", "href="),
        ("[ok](https://example.com)", 'rel="noopener noreferrer nofollow"', "javascript"),
        ("```js\nlet a = '<b>';\n```", '<span class="kd">let</span>', "<b>"),
        ("```nosuchlang\n<i>x</i>\n```", "&lt;i&gt;x&lt;/i&gt;", "<i>"),
        ("| a |\n|---|\n| 1 |", "<table>", "<script"),
    ],
)
def test_markdown_is_sanitized(source: str, present: str, absent: str) -> None:
    html = render_markdown(source)
    assert present in html
    assert absent not in html


def test_code_blocks_get_copy_buttons() -> None:
    html = render_markdown("```python\nx = 1\n```")
    assert '<button type="button" class="copy-btn"' in html and "<span>python</span>" in html


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        ('"Paris Trip Plans"\nmore text', "Paris Trip Plans"),
        ("Title: **Baking bread.**", "Baking bread"),
        ("\n\n  ", ""),
        ("2. Mars is far", "Mars is far"),
        ("- Bullet title", "Bullet title"),
        ("The moon is a celestial body in our planet's solar system.", "The moon is a celestial body in our"),
    ],
)
def test_clean_title(raw: str, title: str) -> None:
    assert clean_title(raw) == title


def test_provisional_title() -> None:
    assert services.provisional_title("  hello   world ") == "hello world"
    assert services.provisional_title("x" * 100).endswith("…")


@pytest.mark.database
@override_settings(MOONCAKE_CHAT_DEFAULTS={"temperature": 0.1, "max_tokens": 99, "bogus": 1})
@pytest.mark.django_db
def test_defaults_from_settings_seed_new_chats() -> None:
    user = User.objects.create_user("u")
    chat = services.conversation_create(user=user)
    assert (chat.temperature, chat.max_tokens, chat.top_p) == (0.1, 99, 1.0)
    assert selectors.chat_defaults().temperature == 0.1


@pytest.mark.database
@pytest.mark.django_db
def test_console_defaults_win() -> None:
    from webapp.core.models import EngineSettings

    EngineSettings.objects.create(default_temperature=0.25, default_max_tokens=77)
    chat = services.conversation_create(user=User.objects.create_user("u"))
    assert (chat.temperature, chat.max_tokens, chat.top_p) == (0.25, 77, 1.0)


@pytest.mark.database
@pytest.mark.django_db
def test_generated_title_never_overwrites_a_rename() -> None:
    user = User.objects.create_user("u")
    chat = services.conversation_create(user=user)
    assert services.conversation_set_generated_title(conversation_id=chat.pk, title="Model title")
    services.conversation_rename(conversation=chat, title="Mine")
    assert not services.conversation_set_generated_title(conversation_id=chat.pk, title="Other")
    chat.refresh_from_db()
    assert chat.title == "Mine"


@pytest.mark.database
@pytest.mark.django_db
def test_message_rules() -> None:
    user = User.objects.create_user("u")
    chat = services.conversation_create(user=user)
    with pytest.raises(InvalidRequest, match="empty"):
        services.user_message_create(conversation=chat, content="  ")
    with pytest.raises(InvalidRequest, match="longer"):
        services.user_message_create(conversation=chat, content="x" * 40_000)
    with pytest.raises(InvalidRequest, match="nothing to regenerate"):
        selectors.regenerate_target(conversation=chat, message_id=None)
    first = services.user_message_create(conversation=chat, content="hello there friend")
    chat.refresh_from_db()
    assert chat.title == "hello there friend"
    with pytest.raises(InvalidRequest, match="cannot be edited"):
        services.user_message_edit(conversation=chat, message_id=first.pk + 100, content="x")
    with pytest.raises(ValueError):
        services.conversation_update_settings(
            conversation=chat, system_prompt="", model="", temperature=3, top_p=1, max_tokens=5
        )
