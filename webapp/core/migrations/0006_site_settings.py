from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0005_model_access"),
    ]

    operations = [
        migrations.CreateModel(
            name="SiteSettings",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("default_system_prompt", models.TextField(blank=True, max_length=20000)),
                ("banner_text", models.CharField(blank=True, max_length=500)),
                (
                    "banner_level",
                    models.CharField(
                        choices=[("info", "information"), ("warning", "warning")],
                        default="info",
                        max_length=8,
                    ),
                ),
                ("banner_revision", models.PositiveIntegerField(default=0)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
    ]
