"""Existing chats become one-line trees. Apart from 0003: on PostgreSQL, rows updated in the migration
that adds the foreign keys would leave trigger events pending when its deferred index creation runs."""

import itertools
from typing import Any

from django.db import migrations


def link_linear_chats(apps: Any, schema_editor: Any) -> None:
    """Every existing chat is a line: each message's parent is the one before it, and it is shown."""
    message_model = apps.get_model("chat", "Message")
    conversation_model = apps.get_model("chat", "Conversation")
    for conversation_id in conversation_model.objects.values_list("id", flat=True).iterator():
        ids = list(
            message_model.objects.filter(conversation_id=conversation_id)
            .order_by("id")
            .values_list("id", flat=True)
        )
        if not ids:
            continue
        conversation_model.objects.filter(pk=conversation_id).update(active_root_id=ids[0])
        for parent_id, child_id in itertools.pairwise(ids):
            message_model.objects.filter(pk=child_id).update(parent_id=parent_id)
            message_model.objects.filter(pk=parent_id).update(active_child_id=child_id)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0003_message_tree"),
    ]

    operations = [
        migrations.RunPython(link_linear_chats, migrations.RunPython.noop),
    ]
