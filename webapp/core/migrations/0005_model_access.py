from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("core", "0004_replica_state"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelregistration",
            name="allowed_groups",
            field=models.ManyToManyField(blank=True, related_name="models", to="auth.group"),
        ),
    ]
