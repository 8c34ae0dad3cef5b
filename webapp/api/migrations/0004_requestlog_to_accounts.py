"""RequestLog now belongs to accounts (its 0004): only Django's record of the model moves, the table stays."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0003_requestlog_source"),
        ("accounts", "0004_requestlog_from_api"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="RequestLog")]),
    ]
