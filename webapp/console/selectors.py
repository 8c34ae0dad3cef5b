"""Reads for the console pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet

from inference.api import ModelInfo
from webapp.accounts.models import RequestLog
from webapp.console.models import AuditLog, ConsoleJob
from webapp.console.replication import BUSY_STATES, live_replicas
from webapp.core.engine_settings import resolve_registered_engine
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.core.native_paths import native_path_label
from webapp.serving.engine_trouble import engine_trouble
from webapp.serving.jobs import ProcessJob
from webapp.serving.runtime import get_runtime

PAGE_SIZE = 100
# The request log pages through everything kept: 50 rows stay readable on one screen.
REQUEST_LOG_PAGE_SIZE = 50
# Counts above this cannot be stored (the columns are 32-bit on PostgreSQL): a larger filter matches nothing.
MAX_STORED_COUNT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ReplicaModelState:
    """One model's state on one replica, as its last heartbeat reported it."""

    replica: str
    state: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class ModelRow:
    info: Any  # inference.ModelInfo (or the test double)
    registration: ModelRegistration | None
    job: ProcessJob | None
    is_default: bool
    replicas: tuple[ReplicaModelState, ...] = ()  # every live replica's state, when there are several
    native_path: str = ""  # whether it runs in our engine and how (inference.manager.native_path)
    trouble: str = ""  # loaded, but its engine cannot serve now: why (an upstream down or refusing our key)
    origin: str = ""  # a model registered at start (not in the console): where from, as its badge says

    @property
    def origin_title(self) -> str:
        """The origin badge's tooltip."""
        if self.origin == YAML_ORIGIN:
            return f"Registered at start from {settings.MOONCAKE_CONFIG_PATH}"
        return "The model that ships with Mooncake, registered at start: no mooncake.yaml names models here"

    @property
    def download_percent(self) -> int | None:
        """How much of a downloading hub model is fetched, when its size is known."""
        done = getattr(self.info, "download_bytes_done", None)  # getattr: test doubles may lack them
        total = getattr(self.info, "download_bytes_total", None)
        if self.info.state != "downloading" or done is None or not total:
            return None
        return min(100, 100 * done // total)

    @property
    def busy(self) -> bool:
        return (
            self.job is not None
            or self.info.state in BUSY_STATES
            or any(r.state in BUSY_STATES for r in self.replicas)
        )


def replica_states() -> dict[str, tuple[ReplicaModelState, ...]]:
    """Each model's state on every live replica, when more than one reports (else nothing to compare)."""
    replicas = live_replicas()
    if len(replicas) < 2:
        return {}
    reports = [
        (replica.name, {str(m.get("name")): m for m in replica.model_states if isinstance(m, dict)})
        for replica in replicas
    ]
    names = sorted({name for _, reported in reports for name in reported})
    states: dict[str, list[ReplicaModelState]] = {}
    for replica_name, reported in reports:
        for name in names:
            model = reported.get(name)
            state = ReplicaModelState(
                replica=replica_name,
                state=str(model.get("state", "")) if model else "not registered",
                error=str(model.get("error") or "") if model else "",
            )
            states.setdefault(name, []).append(state)
    return {name: tuple(rows) for name, rows in states.items()}


def model_rows() -> list[ModelRow]:
    """The manager's models, then saved ones it has not taken up yet (a worker's import, another
    replica's registration): those join it at the next model action (registry.sync_manager), not here."""
    manager = get_runtime().manager()
    registrations = {row.name: row for row in ModelRegistration.objects.all()}
    infos = list(manager.list())
    known = {info.name for info in infos}
    replicas = replica_states()
    infos += [
        ModelInfo(name=row.name, aliases=list(row.aliases), source=row.source)
        for name, row in registrations.items()
        if name not in known
    ]
    return [
        ModelRow(
            info=info,
            registration=registrations.get(info.name),
            job=get_runtime().jobs.active_for(info.name),
            is_default=info.name == manager.default_name,
            replicas=replicas.get(info.name, ()),
            native_path=_native_path(registrations.get(info.name)),
            trouble=engine_trouble(manager, info) or "",
            origin=_origin(registrations.get(info.name)),
        )
        for info in infos
    ]


YAML_ORIGIN = "from mooncake.yaml"
BUILTIN_ORIGIN = "built in"


def _origin(registration: ModelRegistration | None) -> str:
    """A row the server recorded at start (`builtin`) came from mooncake.yaml only where there is one: with
    no file, it is the bundled default model, and a "from mooncake.yaml" badge sent admins looking for a
    file that does not exist."""
    if registration is None or not registration.builtin:
        return ""
    path = settings.MOONCAKE_CONFIG_PATH
    return YAML_ORIGIN if path is not None and path.is_file() else BUILTIN_ORIGIN


def _native_path(registration: ModelRegistration | None) -> str:
    """For a registered model, as it would load now; its settings' own errors show where they are edited.
    The tuning page's settings (batching, cache) never change the path: resolved without them, the page
    reads no more rows."""
    if registration is None:
        return ""
    try:
        return native_path_label(resolve_registered_engine(registration, EngineSettings()).config)
    except (TypeError, ValueError):
        return ""


@dataclass(frozen=True, slots=True)
class RequestFilters:
    source: str = ""  # "api", "chat" or "" for both
    request_id: str = ""
    user: str = ""
    key_prefix: str = ""
    model: str = ""
    finish_reason: str = ""
    status: str = ""  # "ok" (< 400), "error" (>= 400) or an exact code
    min_tokens: int | None = None
    min_ttft_s: float | None = None
    min_duration_s: float | None = None


def request_log(filters: RequestFilters) -> QuerySet[RequestLog]:
    """Every row the filters match, newest first (the id breaks ties, so pages never share a row)."""
    rows = RequestLog.objects.select_related("user", "api_key").order_by("-created_at", "-id")
    if filters.source:
        rows = rows.filter(source=filters.source)
    if filters.request_id:
        rows = rows.filter(request_id=filters.request_id.strip())
    if filters.user:
        rows = rows.filter(user__username__icontains=filters.user)
    if filters.key_prefix:
        rows = rows.filter(api_key__prefix__startswith=filters.key_prefix)
    if filters.model:
        rows = rows.filter(model__icontains=filters.model)
    if filters.finish_reason:
        rows = rows.filter(finish_reason=filters.finish_reason)
    if filters.status == "ok":
        rows = rows.filter(status_code__lt=400)
    elif filters.status == "error":
        rows = rows.filter(status_code__gte=400)
    elif filters.status.isdigit() and len(filters.status) == 3:  # an HTTP status: never overflows the column
        rows = rows.filter(status_code=int(filters.status))
    if filters.min_tokens is not None:
        # A bigger number than the database holds would raise there instead of matching no row.
        rows = rows.filter(completion_tokens__gte=min(filters.min_tokens, MAX_STORED_COUNT))
    if filters.min_ttft_s is not None:
        rows = rows.filter(ttft_s__gte=filters.min_ttft_s)
    if filters.min_duration_s is not None:
        rows = rows.filter(duration_s__gte=filters.min_duration_s)
    return rows


def request_log_page(filters: RequestFilters, page: str | None) -> Page[RequestLog]:
    """One page of the matching rows; a page number that is not one (or past the end) gives the nearest
    page, never an error: the number comes from a URL anyone can edit."""
    return Paginator(request_log(filters), REQUEST_LOG_PAGE_SIZE).get_page(page)


def users_list() -> QuerySet[User]:
    return User.objects.annotate(
        active_keys=Count("api_keys", filter=Q(api_keys__revoked_at__isnull=True))
    ).order_by("username")


def audit_list(*, action: str = "") -> QuerySet[AuditLog]:
    rows = AuditLog.objects.select_related("actor")
    return (rows.filter(action__startswith=action) if action else rows)[:PAGE_SIZE]


def console_jobs() -> QuerySet[ConsoleJob]:
    return ConsoleJob.objects.select_related("created_by")[:PAGE_SIZE]


def any_job_active() -> bool:
    return (
        any(j.is_active for j in get_runtime().jobs.list())
        or ConsoleJob.objects.filter(state__in=[ConsoleJob.State.PENDING, ConsoleJob.State.RUNNING]).exists()
    )
