from typing import Any

from django.db import migrations, models


def create_the_lock_row(apps: Any, schema_editor: Any) -> None:
    apps.get_model("core", "SetupLock").objects.get_or_create(id=1)


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="SetupLock",
            fields=[
                ("id", models.PositiveSmallIntegerField(primary_key=True, serialize=False)),
                ("last_taken", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.RunPython(create_the_lock_row, migrations.RunPython.noop),
    ]
