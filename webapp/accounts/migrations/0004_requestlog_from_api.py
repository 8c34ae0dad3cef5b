"""RequestLog moves from the api app to accounts, which keeps the usage it sums: the table stays."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_group_policy_quotas_usage_by_model"),
        ("api", "0003_requestlog_source"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RequestLog",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        (
                            "source",
                            models.CharField(
                                choices=[("api", "API"), ("chat", "Chat")],
                                db_index=True,
                                default="api",
                                max_length=8,
                            ),
                        ),
                        ("request_id", models.CharField(blank=True, db_index=True, max_length=128)),
                        ("endpoint", models.CharField(max_length=64)),
                        ("model", models.CharField(blank=True, max_length=200)),
                        ("stream", models.BooleanField(default=False)),
                        ("status_code", models.PositiveSmallIntegerField()),
                        ("prompt_tokens", models.PositiveIntegerField(default=0)),
                        ("completion_tokens", models.PositiveIntegerField(default=0)),
                        ("ttft_s", models.FloatField(blank=True, null=True)),
                        ("duration_s", models.FloatField()),
                        ("finish_reason", models.CharField(blank=True, max_length=32)),
                        ("error", models.TextField(blank=True)),
                        ("prompt_text", models.TextField(blank=True)),
                        (
                            "api_key",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="requests",
                                to="accounts.apikey",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="api_requests",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "api_requestlog",
                        "ordering": ["-created_at"],
                    },
                ),
            ],
        ),
    ]
