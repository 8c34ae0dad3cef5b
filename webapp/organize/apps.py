from django.apps import AppConfig
from django.db.models.signals import post_migrate


class OrganizeConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.organize"

    def ready(self) -> None:
        from webapp.organize import fulltext

        # A later chat migration that rebuilds chat_message on SQLite drops the index's triggers with the
        # old table: every migrate puts back whatever is missing.
        post_migrate.connect(fulltext.ensure_after_migrate, dispatch_uid="organize-fulltext")
