"""Migration tests' two moves: roll the database back to a state (to write rows the old way), then forward."""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_back_to(targets: list[tuple[str, str]]) -> Apps:
    """Migrate to `targets`; the models as they were there (write old rows through these)."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_forward() -> None:
    """Every migration again, to the latest state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
