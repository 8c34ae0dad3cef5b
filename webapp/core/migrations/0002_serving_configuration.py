"""ModelRegistration and EngineSettings join core (state only): their tables and rows stay as they are."""

from django.db import migrations, models

MODEL_REGISTRATION = migrations.CreateModel(
    name="ModelRegistration",
    fields=[
        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
        ("name", models.CharField(max_length=100, unique=True)),
        ("aliases", models.JSONField(blank=True, default=list)),
        ("source", models.CharField(max_length=1000)),
        ("builtin", models.BooleanField(default=False)),
        ("max_model_len", models.PositiveIntegerField(blank=True, null=True)),
        (
            "dtype",
            models.CharField(
                choices=[
                    ("auto", "Auto"),
                    ("float32", "Float32"),
                    ("bfloat16", "Bfloat16"),
                    ("float16", "Float16"),
                ],
                default="auto",
                max_length=16,
            ),
        ),
        (
            "quantization",
            models.CharField(
                choices=[
                    ("none", "none (dequantized weights)"),
                    ("gguf", "gguf (keep Q4_0/Q4_1 4-bit, CPU)"),
                ],
                default="none",
                max_length=16,
            ),
        ),
        ("sampling_defaults", models.JSONField(blank=True, default=dict)),
        ("system_prompt", models.TextField(blank=True)),
        ("keep_alive_seconds", models.PositiveIntegerField(blank=True, null=True)),
        ("created_at", models.DateTimeField(auto_now_add=True)),
        ("updated_at", models.DateTimeField(auto_now=True)),
    ],
    options={"ordering": ["name"], "db_table": "console_modelregistration"},
)

ENGINE_SETTINGS = migrations.CreateModel(
    name="EngineSettings",
    fields=[
        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
        ("max_num_seqs", models.PositiveIntegerField(blank=True, null=True)),
        ("max_num_batched_tokens", models.PositiveIntegerField(blank=True, null=True)),
        ("kv_cache_memory_bytes", models.PositiveBigIntegerField(blank=True, null=True)),
        ("block_size", models.PositiveIntegerField(blank=True, null=True)),
        ("enable_chunked_prefill", models.BooleanField(default=True)),
        ("enable_prefix_caching", models.BooleanField(default=True)),
        (
            "attention_backend",
            models.CharField(
                blank=True,
                choices=[
                    ("auto", "auto"),
                    ("torch", "torch"),
                    ("triton", "triton"),
                    ("flash_attn", "flash_attn"),
                ],
                max_length=16,
                null=True,
            ),
        ),
        ("enforce_eager", models.BooleanField(blank=True, null=True)),
        ("default_temperature", models.FloatField(blank=True, null=True)),
        ("default_top_p", models.FloatField(blank=True, null=True)),
        ("default_max_tokens", models.PositiveIntegerField(blank=True, null=True)),
        ("drain_timeout_seconds", models.PositiveIntegerField(default=30)),
        ("memory_budget_bytes", models.PositiveBigIntegerField(blank=True, null=True)),
        ("evict_lru", models.BooleanField(default=True)),
        ("log_prompts", models.BooleanField(default=False)),
        ("updated_at", models.DateTimeField(auto_now=True)),
    ],
    options={"db_table": "console_enginesettings"},
)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("console", "0003_engine_attention_backend_enforce_eager"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[MODEL_REGISTRATION, ENGINE_SETTINGS]),
    ]
