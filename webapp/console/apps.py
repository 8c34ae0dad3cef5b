from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webapp.console"

    def ready(self) -> None:
        from webapp.accounts.events import account_changed
        from webapp.console.audit import record_account_event
        from webapp.console.startup import connect_startup_sync

        connect_startup_sync()
        # Accounts announces its changes; the console keeps them in the audit log.
        account_changed.connect(record_account_event, dispatch_uid="console-audit-accounts")
