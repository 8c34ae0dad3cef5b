"""Full-text search over chat messages: SQLite FTS5 or PostgreSQL's tsvector, behind `message_matches`.

SQLite: an external-content FTS5 table over chat_message (no second copy of the text), kept in step by
triggers. PostgreSQL: a GIN index on the same to_tsvector expression the query uses. User text never
reaches either query language as syntax: it is cut into words and each word is quoted (FTS5) or passed
through plainto_tsquery (PostgreSQL), so `"`, `*`, `NEAR(` or `-` are only ever searched for as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper

FTS_TABLE = "organize_message_fts"
PG_INDEX = "organize_message_tsv"
PG_CONFIG = "english"
# Highlight markers the databases put around matches; private-use characters, replaced after escaping.
MARK_START, MARK_END = "\ue000", "\ue001"
# A search box is for a few words: longer input is cut, never an error.
MAX_QUERY_CHARS = 200
MAX_TERMS = 12
_WORD = re.compile(r"\w+", re.UNICODE)

_TRIGGERS = {
    f"{FTS_TABLE}_ai": f"""CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ai AFTER INSERT ON chat_message BEGIN
        INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content); END""",
    f"{FTS_TABLE}_ad": f"""CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_ad AFTER DELETE ON chat_message BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) VALUES ('delete', old.id, old.content); END""",
    # Only when the text changes: token counts and status updates during streaming leave the index alone.
    f"{FTS_TABLE}_au": f"""CREATE TRIGGER IF NOT EXISTS {FTS_TABLE}_au AFTER UPDATE OF content ON chat_message
        BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content); END""",
}


def query_terms(query: str) -> list[str]:
    """The words of a user's query, in order, without repeats; punctuation and operators dropped."""
    seen: list[str] = []
    for word in _WORD.findall(query[:MAX_QUERY_CHARS]):
        word = word.lower()
        if word not in seen:
            seen.append(word)
    return seen[:MAX_TERMS]


def fts5_expression(terms: list[str]) -> str:
    """Every term must appear; the last one may be a prefix (the user may still be typing it)."""
    quoted = ['"' + term.replace('"', '""') + '"' for term in terms]
    quoted[-1] += "*"
    return " ".join(quoted)


def ensure_sqlite_index(conn: BaseDatabaseWrapper, *, rebuild: bool = False) -> bool:
    """Create the FTS table and triggers where missing; rebuild from chat_message if anything was."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger') AND name LIKE %s",
                       [f"{FTS_TABLE}%"])  # fmt: skip
        present = {row[0] for row in cursor.fetchall()}
        missing = FTS_TABLE not in present or any(name not in present for name in _TRIGGERS)
        if not missing and not rebuild:
            return False
        cursor.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(content, content='chat_message',"
            " content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')"
        )
        for sql in _TRIGGERS.values():
            cursor.execute(sql)
        cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")
    return True


def ensure_postgres_index(conn: BaseDatabaseWrapper) -> None:
    with conn.cursor() as cursor:
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON chat_message "
            f"USING GIN (to_tsvector('{PG_CONFIG}'::regconfig, content))"
        )


def ensure_index(conn: BaseDatabaseWrapper) -> None:
    if conn.vendor == "sqlite":
        ensure_sqlite_index(conn)
    elif conn.vendor == "postgresql":
        ensure_postgres_index(conn)


def ensure_after_migrate(sender: Any, *, using: str = "default", plan: Any = None, **kwargs: Any) -> None:
    from django.apps import apps
    from django.db import connections

    if getattr(sender, "name", "") != "webapp.organize" or not apps.is_installed("webapp.organize"):
        return
    conn = connections[using]
    # Before this app's migration ran (migrate to an older state) there is nothing to maintain.
    with conn.cursor() as cursor:
        tables = conn.introspection.table_names(cursor)
    if "organize_placement" in tables and "chat_message" in tables:
        ensure_index(conn)


@dataclass(frozen=True, slots=True)
class MessageMatch:
    message_id: int
    conversation_id: int
    score: float  # higher is better
    snippet: str  # plain text with MARK_START/MARK_END around matches


def message_matches(*, user_id: int, terms: list[str], limit: int = 200) -> list[MessageMatch]:
    """The user's messages that contain every term, best first, with a highlighted snippet each."""
    if not terms:
        return []
    if connection.vendor == "postgresql":
        return _postgres_matches(user_id, terms, limit)
    if connection.vendor == "sqlite":
        return _sqlite_matches(user_id, terms, limit)
    raise NotImplementedError(f"full-text search is not implemented for {connection.vendor}")


def _sqlite_matches(user_id: int, terms: list[str], limit: int) -> list[MessageMatch]:
    sql = f"""
        SELECT m.id, m.conversation_id, -bm25({FTS_TABLE}),
               snippet({FTS_TABLE}, 0, %s, %s, '…', 16)
        FROM {FTS_TABLE}
        JOIN chat_message m ON m.id = {FTS_TABLE}.rowid
        JOIN chat_conversation c ON c.id = m.conversation_id
        WHERE {FTS_TABLE} MATCH %s AND c.user_id = %s
        ORDER BY bm25({FTS_TABLE}) LIMIT %s"""
    with connection.cursor() as cursor:
        cursor.execute(sql, [MARK_START, MARK_END, fts5_expression(terms), user_id, limit])
        rows = cursor.fetchall()
    return [MessageMatch(int(r[0]), int(r[1]), float(r[2]), str(r[3] or "")) for r in rows]


def _postgres_matches(user_id: int, terms: list[str], limit: int) -> list[MessageMatch]:
    # plainto_tsquery treats its input as plain words; the last word also matches as a prefix.
    vector = f"to_tsvector('{PG_CONFIG}'::regconfig, m.content)"
    sql = f"""
        WITH q AS (
            SELECT plainto_tsquery('{PG_CONFIG}', %s)
                   && to_tsquery('{PG_CONFIG}', quote_literal(%s) || ':*') AS query
        ), hits AS (
            SELECT m.id, m.conversation_id, m.content, ts_rank({vector}, q.query) AS score, q.query
            FROM chat_message m JOIN chat_conversation c ON c.id = m.conversation_id, q
            WHERE c.user_id = %s AND {vector} @@ q.query
            ORDER BY score DESC, m.id DESC LIMIT %s
        )
        SELECT id, conversation_id, score,
               ts_headline('{PG_CONFIG}', content, query,
                           'StartSel="' || %s || '", StopSel="' || %s || '", MaxWords=24, MinWords=10')
        FROM hits ORDER BY score DESC, id DESC"""
    params: list[str | int] = [" ".join(terms[:-1]), terms[-1], user_id, limit, MARK_START, MARK_END]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [MessageMatch(int(r[0]), int(r[1]), float(r[2]), str(r[3] or "")) for r in rows]
