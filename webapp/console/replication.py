"""Model state across replicas: every replica applies what the console saved and reports what it has.

An admin's action on one replica is saved in the ModelRegistration rows and announced on Redis. Each
replica's ModelSync then reconciles its own manager with the rows: at once on the announcement, and every
SYNC_INTERVAL_S in case one was missed or the replica started later. It also writes a heartbeat, its
models' states and its latest dashboard sample, to its Replica row, which the Models and Live pages read.

What reconciling means is console.reconcile's.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import timezone

from webapp.console.models import Replica
from webapp.console.registry import engine_config_for, manager_options
from webapp.core.models import ModelRegistration
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)

CHANNEL = "mooncake:models"
SYNC_INTERVAL_S = 5.0
HEARTBEAT_S = 2.0
# A replica whose heartbeat is older than this has stopped (or cannot reach the database).
GONE_AFTER_S = 15.0
BUSY_STATES = ("downloading", "loading", "unloading", "restarting")

ConfigKey = tuple[Any, ...]


def config_key(registration: ModelRegistration, tuning: Any) -> ConfigKey:
    """Everything a replica must restart or re-register a model to apply."""
    options = manager_options(registration)
    return (
        engine_config_for(registration, tuning),
        tuple(options["aliases"]),
        options.get("keep_alive_seconds"),
    )


class ModelSync:
    """This replica's side of the shared model state: reconcile, heartbeat, and the Redis listener."""

    def __init__(self, *, name: str | None = None) -> None:
        self.name = name or settings.MOONCAKE_REPLICA_NAME
        self.started_at = timezone.now()
        self.lock = threading.Lock()  # one reconcile at a time: the sync thread, or a test calling it
        self._reconcile: Callable[[ModelSync], None] | None = None
        self._nudge = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.applied: dict[str, int] = {}  # the state_revision each model's load/unload was applied at
        self.configs: dict[str, ConfigKey] = {}  # what each model runs with here
        self.seen: set[str] = set()  # the rows at the last reconcile: one gone since was unregistered

    # ---- what the console's own actions tell it -------------------------------------------------------

    def remember(self, name: str, key: ConfigKey) -> None:
        """This replica registered or is restarting `name` with `key`: not a change to apply again."""
        self.configs[name] = key

    def mark_applied(self, name: str, revision: int) -> None:
        self.applied[name] = max(revision, self.applied.get(name, 0))

    def nudge(self) -> None:
        self._nudge.set()

    # ---- the loop -----------------------------------------------------------------------------------

    def start(self, reconcile: Callable[[ModelSync], None]) -> None:
        """Run `reconcile` (console.reconcile) on announcements and on a timer, and the heartbeat."""
        if self._threads:
            return
        self._reconcile = reconcile
        targets = [(self._run, "mooncake-model-sync")]
        if settings.REDIS_URL:
            targets.append((self._listen, "mooncake-model-sync-listen"))
        self._threads = [threading.Thread(target=t, name=n, daemon=True) for t, n in targets]
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        self._stopping.set()
        self._nudge.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _run(self) -> None:
        next_sync = next_beat = 0.0
        while not self._stopping.is_set():
            now = time.monotonic()
            try:
                # The first reconcile waits for the default model's load, which runs on its own thread.
                if get_runtime().started.is_set() and (self._nudge.is_set() or now >= next_sync):
                    self._nudge.clear()
                    if self._reconcile is not None:
                        self._reconcile(self)
                    next_sync = now + SYNC_INTERVAL_S
                if now >= next_beat:
                    self.heartbeat()
                    next_beat = now + HEARTBEAT_S
            except Exception:
                logger.exception("Model state sync failed; retrying in %.0f s", SYNC_INTERVAL_S)
                next_sync = now + SYNC_INTERVAL_S
            finally:
                connections.close_all()  # this thread's own connections
            self._nudge.wait(max(0.05, min(next_sync, next_beat) - time.monotonic()))

    def _listen(self) -> None:
        import redis

        while not self._stopping.is_set():
            try:
                client = redis.Redis.from_url(settings.REDIS_URL)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(CHANNEL)
                while not self._stopping.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None and message.get("data") != self.name.encode():
                        self._nudge.set()
                pubsub.close()
                client.close()
            except redis.RedisError as exc:
                logger.warning("Model state announcements unavailable (%s); syncing every %.0f s", exc,
                               SYNC_INTERVAL_S)  # fmt: skip
                self._stopping.wait(SYNC_INTERVAL_S)

    # ---- heartbeat ----------------------------------------------------------------------------------

    def heartbeat(self) -> None:
        from webapp.console.dashboard import Sampler

        manager = get_runtime().peek_manager()
        states = [
            {"name": info.name, "state": info.state, "error": info.error or ""}
            for info in (manager.list() if manager is not None else [])
        ]
        Replica.objects.update_or_create(
            name=self.name,
            defaults={
                "started_at": self.started_at,
                "seen_at": timezone.now(),
                "model_states": states,
                "sample": get_runtime().service(Sampler).latest(),
            },
        )


def announce(sync: ModelSync) -> None:
    """Tell every replica (this one too) that the saved model state changed."""
    sync.nudge()
    publish(sync.name)


def publish(sender: str) -> None:
    """Wake the replicas' syncs through Redis (a Celery worker that saved a model calls this too)."""
    if not settings.REDIS_URL:
        return
    import redis

    try:
        with redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2) as client:
            client.publish(CHANNEL, sender)
    except redis.RedisError as exc:  # the others still catch up at their next periodic pass
        logger.warning("Could not announce a model change (%s); replicas apply it within %.0f s", exc,
                       SYNC_INTERVAL_S)  # fmt: skip


def model_sync() -> ModelSync:
    return get_runtime().service(ModelSync)


def live_replicas() -> list[Replica]:
    """Replicas whose heartbeat is recent, by name."""
    since = timezone.now() - dt.timedelta(seconds=GONE_AFTER_S)
    return list(Replica.objects.filter(seen_at__gte=since))
