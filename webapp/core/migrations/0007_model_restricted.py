"""A model's restriction stands on its own: it no longer ends when its last group is deleted."""

from typing import Any

from django.db import migrations, models


def restrict_models_with_groups(apps: Any, schema_editor: Any) -> None:
    registration = apps.get_model("core", "ModelRegistration")
    registration.objects.filter(allowed_groups__isnull=False).update(restricted=True)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0006_site_settings"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelregistration",
            name="restricted",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(restrict_models_with_groups, migrations.RunPython.noop),
    ]
