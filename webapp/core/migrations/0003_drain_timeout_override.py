"""drain_timeout_seconds becomes an override: null means MOONCAKE_DRAIN_TIMEOUT / server.drain_timeout.

A saved value equal to today's configured one was, as far as anyone can tell, copied from it when the row
was first saved: it is cleared, so the effective timeout stays as it was and later follows the
environment and mooncake.yaml. A value an admin changed stays an override.
"""

from typing import Any

from django.conf import settings
from django.db import migrations, models


def clear_copied_default(apps: Any, schema_editor: Any) -> None:
    EngineSettings = apps.get_model("core", "EngineSettings")
    configured = int(getattr(settings, "MOONCAKE_DRAIN_TIMEOUT", 30))
    EngineSettings.objects.filter(drain_timeout_seconds=configured).update(drain_timeout_seconds=None)


def restore_default(apps: Any, schema_editor: Any) -> None:
    EngineSettings = apps.get_model("core", "EngineSettings")
    configured = int(getattr(settings, "MOONCAKE_DRAIN_TIMEOUT", 30))
    EngineSettings.objects.filter(drain_timeout_seconds=None).update(drain_timeout_seconds=configured)


class Migration(migrations.Migration):
    dependencies = [("core", "0002_serving_configuration")]

    operations = [
        migrations.AlterField(
            model_name="enginesettings",
            name="drain_timeout_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(clear_copied_default, restore_default),
    ]
