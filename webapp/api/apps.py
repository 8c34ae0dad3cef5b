from django.apps import AppConfig

from inference.api import EmbeddingClient, EngineClient


def _warm_grammar(engine: EngineClient) -> None:
    if isinstance(engine, EmbeddingClient):  # it never generates, so never under a grammar
        return
    # Imported on the first load, not at django.setup(): the grammar module brings torch and transformers
    # (seconds), which every management command and worker process would otherwise pay for nothing.
    from webapp.api.services.grammar import warm_grammar

    warm_grammar(engine)


class ApiConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.api"

    def ready(self) -> None:
        from webapp.api.services.streaming import cut_streams
        from webapp.serving.runtime import register_load_hook
        from webapp.serving.stream_cuts import register_stream_cutter

        register_stream_cutter(cut_streams)
        register_load_hook(_warm_grammar)
