"""What a replica does to match the saved model state (run by console.replication's ModelSync), per row:

- registered here too (a row deleted on another replica is unregistered here);
- the engine settings the row and the tuning page resolve to: a replica running other ones restarts;
- the admin's last load or unload, applied once per `state_revision` (a level reached once, not a command
  repeated: keep-alive and eviction may unload the model here later without the others reloading it);
- the default model.
"""

from __future__ import annotations

import logging

from webapp.console import lifecycle
from webapp.console.registry import sync_manager
from webapp.console.replication import BUSY_STATES, ModelSync, config_key
from webapp.core.engine_settings import engine_settings_get
from webapp.core.models import ModelRegistration
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)


def reconcile(sync: ModelSync) -> None:
    """Bring this replica's manager in line with the rows (starting jobs; it does not wait for them)."""
    with sync.lock:
        manager = get_runtime().manager()
        jobs = get_runtime().jobs
        rows = {row.name: row for row in ModelRegistration.objects.all()}
        for name in sync.seen - rows.keys():  # before sync_manager, which would save it again
            if name in {info.name for info in manager.list()} and jobs.active_for(name) is None:
                logger.info("Unregistering %s: it was unregistered on another replica", name)
                manager.unregister(name)
                sync.configs.pop(name, None)
        manager = sync_manager()
        rows = {row.name: row for row in ModelRegistration.objects.all()}
        sync.seen = set(rows)
        infos = {info.name: info for info in manager.list()}
        default = next((name for name, row in rows.items() if row.is_default and name in infos), None)
        if default is not None and manager.default_name != default:
            manager.set_default(default)
        tuning = engine_settings_get()
        for name, row in rows.items():
            info = infos.get(name)
            if info is None or info.state in BUSY_STATES or jobs.active_for(name) is not None:
                continue  # not registered here (the registry logged why), or busy: the next pass
            try:
                key = config_key(row, tuning)
            except ValueError:
                logger.exception("Cannot apply the saved settings of %s", name)
                continue
            if sync.configs.setdefault(name, key) != key:
                logger.info("Restarting %s: its settings were changed on another replica", name)
                sync.configs[name] = key
                lifecycle.apply_restart(registration=row)
                continue
            if row.desired_state and row.state_revision > sync.applied.get(name, 0):
                if row.desired_state == row.Desired.LOADED and info.state != "loaded":
                    lifecycle.apply_load(name=name)
                elif row.desired_state == row.Desired.UNLOADED and info.state == "loaded":
                    lifecycle.apply_unload(name=name)
                sync.mark_applied(name, row.state_revision)
