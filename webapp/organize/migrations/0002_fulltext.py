"""The full-text index over chat messages: FTS5 on SQLite, a GIN expression index on PostgreSQL.

Written as code rather than RunSQL because the SQL differs per database (webapp.organize.fulltext holds it,
and a post_migrate hook reuses it to repair triggers a later table rebuild dropped).
"""

from typing import Any

from django.db import migrations


def create_index(apps: Any, schema_editor: Any) -> None:
    from webapp.organize import fulltext

    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        fulltext.ensure_sqlite_index(conn, rebuild=True)  # Indexes the messages already there.
    elif conn.vendor == "postgresql":
        fulltext.ensure_postgres_index(conn)


def drop_index(apps: Any, schema_editor: Any) -> None:
    from webapp.organize import fulltext

    conn = schema_editor.connection
    with conn.cursor() as cursor:
        if conn.vendor == "sqlite":
            for trigger in ("ai", "ad", "au"):
                cursor.execute(f"DROP TRIGGER IF EXISTS {fulltext.FTS_TABLE}_{trigger}")
            cursor.execute(f"DROP TABLE IF EXISTS {fulltext.FTS_TABLE}")
        elif conn.vendor == "postgresql":
            cursor.execute(f"DROP INDEX IF EXISTS {fulltext.PG_INDEX}")


class Migration(migrations.Migration):
    dependencies = [("organize", "0001_initial"), ("chat", "0002_reply_lease")]

    operations = [migrations.RunPython(create_index, drop_index, elidable=False)]
