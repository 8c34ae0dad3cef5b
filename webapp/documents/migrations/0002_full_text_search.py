"""Full-text search over chunks, per database: an FTS5 table kept by triggers on SQLite, a GIN index on
the chunks' English tsvector on PostgreSQL (the expression webapp.documents.retrieval searches)."""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

SQLITE_UP = [
    "CREATE VIRTUAL TABLE documents_chunk_fts USING fts5("
    "text, content='documents_documentchunk', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER documents_chunk_fts_insert AFTER INSERT ON documents_documentchunk BEGIN "
    "INSERT INTO documents_chunk_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER documents_chunk_fts_delete AFTER DELETE ON documents_documentchunk BEGIN "
    "INSERT INTO documents_chunk_fts(documents_chunk_fts, rowid, text) "
    "VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER documents_chunk_fts_update AFTER UPDATE OF text ON documents_documentchunk BEGIN "
    "INSERT INTO documents_chunk_fts(documents_chunk_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO documents_chunk_fts(rowid, text) VALUES (new.id, new.text); END",
    # Chunks written before this migration (none in practice) are indexed too.
    "INSERT INTO documents_chunk_fts(documents_chunk_fts) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS documents_chunk_fts_update",
    "DROP TRIGGER IF EXISTS documents_chunk_fts_delete",
    "DROP TRIGGER IF EXISTS documents_chunk_fts_insert",
    "DROP TABLE IF EXISTS documents_chunk_fts",
]
POSTGRES_UP = [
    "CREATE INDEX documents_chunk_tsv ON documents_documentchunk "
    "USING gin (to_tsvector('english'::regconfig, COALESCE(text, '')))",
]
POSTGRES_DOWN = ["DROP INDEX IF EXISTS documents_chunk_tsv"]


def _run(schema_editor: BaseDatabaseSchemaEditor, by_vendor: dict[str, list[str]]) -> None:
    for statement in by_vendor.get(schema_editor.connection.vendor, []):
        schema_editor.execute(statement, params=None)


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _run(schema_editor, {"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP})


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _run(schema_editor, {"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN})


class Migration(migrations.Migration):
    dependencies = [("documents", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards)]
