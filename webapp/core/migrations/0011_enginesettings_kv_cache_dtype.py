from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0010_user_api_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="enginesettings",
            name="kv_cache_dtype",
            field=models.CharField(
                blank=True,
                choices=[
                    ("auto", "auto"),
                    ("float32", "float32"),
                    ("bfloat16", "bfloat16"),
                    ("float16", "float16"),
                ],
                max_length=16,
                null=True,
            ),
        ),
    ]
