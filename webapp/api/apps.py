from django.apps import AppConfig


class ApiConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.api"

    def ready(self) -> None:
        from webapp.api.services.grammar import warm_grammar
        from webapp.api.services.streaming import cut_streams
        from webapp.core.runtime import register_load_hook
        from webapp.core.stream_cuts import register_stream_cutter

        register_stream_cutter(cut_streams)
        register_load_hook(warm_grammar)
