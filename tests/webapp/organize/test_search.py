"""search_conversations: message text and titles, ranked, scoped to the owner, safe against any query.

Runs on SQLite (FTS5) and, with MOONCAKE_TEST_DATABASE=postgres, on PostgreSQL (tsvector + GIN)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection

from tests.webapp.organize.conftest import MakeChat
from webapp.chat.models import Message
from webapp.organize import fulltext, services
from webapp.organize.fulltext import ensure_after_migrate
from webapp.organize.selectors import search_conversations

pytestmark = pytest.mark.django_db

HOSTILE = [
    '"', '""', "'", "*", "**", "NEAR(", "NEAR(a b", "a OR", "OR", "AND", "NOT", "-", "-moon", "moon-",
    "(", ")", "a:b", "content:moon", "^moon", "moon*", "{a b}", "\\", "%", "_", "' OR 1=1 --", "\x00",
    "moon & | ! :*", "<script>", "x" * 2048, ("moon " * 500)[:2048], "🙂", "ü",
]  # fmt: skip


def _ids(hits: list) -> list[int]:
    return [h.conversation.pk for h in hits]


@pytest.mark.database
def test_finds_words_in_messages_and_ranks_title_matches_first(alice: User, make_chat: MakeChat) -> None:
    body = make_chat(alice, "Cooking", ask="How do volcanoes erupt?", reply="Magma rises through the crust.")
    titled = make_chat(alice, "Volcanoes of Iceland", ask="tell me", reply="Hekla and Katla.")
    make_chat(alice, "Unrelated", ask="weather", reply="sunny")
    hits = search_conversations(user=alice, query="volcanoes")
    assert _ids(hits) == [titled.pk, body.pk]
    # Stemming: "erupting" finds "erupt"; the last word may be half typed ("mag" finds "Magma").
    assert _ids(search_conversations(user=alice, query="erupting")) == [body.pk]
    assert _ids(search_conversations(user=alice, query="rises mag")) == [body.pk]
    # Every word must appear.
    assert search_conversations(user=alice, query="magma sunny") == []


@pytest.mark.database
def test_snippet_highlights_the_match_and_escapes_the_text(alice: User, make_chat: MakeChat) -> None:
    make_chat(alice, "Markup", ask="q", reply="before <script>alert(1)</script> the needle & after")
    [hit] = search_conversations(user=alice, query="needle")
    assert "<mark>needle</mark>" in hit.snippet_html
    assert "<script>" not in hit.snippet_html and "&amp;" in hit.snippet_html
    if connection.vendor == "sqlite":  # PostgreSQL's ts_headline drops tag-like text from its snippets.
        assert "&lt;script&gt;" in hit.snippet_html


@pytest.mark.database
def test_only_the_owners_chats(alice: User, bob: User, make_chat: MakeChat) -> None:
    make_chat(bob, "Bob's", ask="secret plans", reply="hidden")
    mine = make_chat(alice, "Mine", ask="my plans", reply="open")
    assert _ids(search_conversations(user=alice, query="plans")) == [mine.pk]
    assert search_conversations(user=alice, query="secret") == []


@pytest.mark.database
def test_archived_chats_are_found_unless_excluded(alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice, "Old", ask="the aurora borealis", reply="lights")
    services.conversation_archive(conversation=chat, archived=True)
    [hit] = search_conversations(user=alice, query="aurora")
    assert hit.archived
    assert search_conversations(user=alice, query="aurora", include_archived=False) == []


@pytest.mark.database
def test_index_follows_edits_and_deletes(alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice, "Edits", ask="original words", reply="x")
    message = Message.objects.get(conversation=chat, role="user")
    message.content = "replacement text"
    message.save()
    assert search_conversations(user=alice, query="original") == []
    assert _ids(search_conversations(user=alice, query="replacement")) == [chat.pk]
    message.delete()
    assert search_conversations(user=alice, query="replacement") == []


@pytest.mark.database
def test_limit(alice: User, make_chat: MakeChat) -> None:
    for i in range(5):
        make_chat(alice, f"chat {i}", ask="common word", reply="y")
    assert len(search_conversations(user=alice, query="common", limit=3)) == 3


@pytest.mark.database
@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_raise(alice: User, make_chat: MakeChat, query: str) -> None:
    make_chat(alice, "Moon", ask="the moon is full", reply='quotes " and stars * here')
    hits = search_conversations(user=alice, query=query)
    assert isinstance(hits, list)


@pytest.mark.database
def test_operator_words_are_searched_as_text(alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice, "Logic", ask="either lemons OR limes", reply="NEAR(kettle")
    make_chat(alice, "Other", ask="nothing", reply="here")
    assert _ids(search_conversations(user=alice, query="kettle NEAR(")) == [chat.pk]
    assert _ids(search_conversations(user=alice, query='"limes" OR')) == [chat.pk]
    assert _ids(search_conversations(user=alice, query="lemons -limes")) == [chat.pk]  # "-" is no NOT


def test_query_terms() -> None:
    assert fulltext.query_terms('  "Moon*" NEAR( moon -x ') == ["moon", "near", "x"]
    assert fulltext.query_terms("x" * 5000) == ["x" * fulltext.MAX_QUERY_CHARS]
    assert len(fulltext.query_terms(" ".join(f"w{i}" for i in range(50)))) == fulltext.MAX_TERMS
    assert fulltext.fts5_expression(["a", "b"]) == '"a" "b"*'


@pytest.mark.database
def test_sqlite_index_repairs_itself_after_a_table_rebuild(alice: User, make_chat: MakeChat) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    chat = make_chat(alice, "Before", ask="kept words", reply="x")
    with connection.cursor() as cursor:  # What rebuilding chat_message in a later migration leaves.
        for name in ("ai", "ad", "au"):
            cursor.execute(f"DROP TRIGGER {fulltext.FTS_TABLE}_{name}")
        cursor.execute(f"DELETE FROM {fulltext.FTS_TABLE}")  # Even an emptied index comes back.
    from django.apps import apps

    ensure_after_migrate(apps.get_app_config("organize"), using="default")
    assert _ids(search_conversations(user=alice, query="kept")) == [chat.pk]
    later = make_chat(alice, "After", ask="fresh words", reply="y")
    assert _ids(search_conversations(user=alice, query="fresh")) == [later.pk]


@pytest.mark.postgres
def test_postgres_uses_the_gin_index(alice: User, make_chat: MakeChat) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: run with MOONCAKE_TEST_DATABASE=postgres")
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [fulltext.PG_INDEX])
        [(definition,)] = cursor.fetchall()
        assert "gin" in definition.lower() and "to_tsvector" in definition
        cursor.execute("SET enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT id FROM chat_message WHERE "
            f"to_tsvector('{fulltext.PG_CONFIG}'::regconfig, content) @@ plainto_tsquery('english', 'moon')"
        )
        plan = " ".join(row[0] for row in cursor.fetchall())
        cursor.execute("SET enable_seqscan = on")
    assert fulltext.PG_INDEX in plan
    chat = make_chat(alice, "Tides", ask="the moon pulls the tides", reply="gravity")
    [hit] = search_conversations(user=alice, query="moon")
    assert hit.conversation.pk == chat.pk and "<mark>moon</mark>" in hit.snippet_html
