from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.console"

    def ready(self) -> None:
        from webapp.accounts.events import account_changed
        from webapp.console import on_demand_hooks
        from webapp.console.audit import record_account_event
        from webapp.console.startup import connect_startup_sync
        from webapp.console.uploads import CHUNK_BYTES, UPLOADS_PATH
        from webapp.core.body_limits import register_body_limit
        from webapp.serving import on_demand

        connect_startup_sync()
        on_demand.install(estimate=on_demand_hooks.estimate, start=on_demand_hooks.start)
        # A model upload's chunk is raw bytes, never a form: exactly one chunk, whatever the site's limit.
        register_body_limit(UPLOADS_PATH, CHUNK_BYTES)
        # Accounts announces its changes; the console keeps them in the audit log.
        account_changed.connect(record_account_event, dispatch_uid="console-audit-accounts")
