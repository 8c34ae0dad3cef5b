from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.console"

    def ready(self) -> None:
        from webapp.console.startup import connect_startup_sync

        connect_startup_sync()
