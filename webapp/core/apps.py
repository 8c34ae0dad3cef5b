from django.apps import AppConfig


class CoreConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.core"
    verbose_name = "Mooncake core"

    def ready(self) -> None:
        from webapp.core.metrics import register_engine_collector

        register_engine_collector()
