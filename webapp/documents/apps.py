from django.apps import AppConfig


class DocumentsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.documents"

    def ready(self) -> None:
        from webapp.documents import citations, hooks
        from webapp.serving import chat_context

        # Documents join each reply's prompt; each new reply is linked to the passages its prompt used.
        chat_context.register("documents", hooks.extend)
        citations.connect()
