from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "webapp.serving"
    verbose_name = "Mooncake serving"

    def ready(self) -> None:
        from webapp.serving.metrics import register_engine_collector

        register_engine_collector()
