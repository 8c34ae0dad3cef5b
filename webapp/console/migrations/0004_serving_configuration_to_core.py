"""ModelRegistration and EngineSettings leave the console's state; core's migration 0002 took their tables."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0003_engine_attention_backend_enforce_eager"),
        ("core", "0002_serving_configuration"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ModelRegistration"),
                migrations.DeleteModel(name="EngineSettings"),
            ]
        ),
    ]
