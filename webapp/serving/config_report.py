"""What `mooncake check` prints: every effective setting and its source, per model for the engine's."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from inference.api import settings_not_read
from webapp.core.config import MooncakeSettings, Sourced
from webapp.core.engine_config import ResolvedEngine
from webapp.core.engine_settings import memory_budget, resolve_registered_engine, server_overrides
from webapp.core.hub_models import HubRef, cached, hub_cache_dir, parse_hub_id, patterns_for
from webapp.core.load_wait import load_wait
from webapp.core.model_list import is_list, listed_models, source_of
from webapp.core.modelpaths import check_source
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.core.native_paths import native_path_label
from webapp.serving.engine import resolve_builtin_engine
from webapp.serving.engine_servers import not_installed_problem
from webapp.serving.memory_check import plan_listed, unsized
from webapp.serving.upstream_probe import Probe, probe_upstream

logger = logging.getLogger(__name__)

NAME_WIDTH = 26
VALUE_WIDTH = 44


@dataclass(slots=True)
class Report:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Upstreams already probed (base_url, key, model): a model in mooncake.yaml and its console row share one.
    probed: dict[tuple[str | None, str | None, str | None], Probe] = field(default_factory=dict)


def config_report() -> Report:
    """The server section (console overrides included), then each model's EngineConfig."""
    report = Report()
    tuning, rows, unread = _console_rows()
    resolved: MooncakeSettings = settings.MOONCAKE_SETTINGS
    if tuning is not None:
        resolved = resolved.overlay(server_overrides(tuning), source="console", origin="tuning page")
    report.lines.append("server")
    report.lines.extend(_table(resolved.sources))
    if unread:
        report.lines.append(f"  (console overrides not shown: {unread})")
    for listed in listed_models(settings.MOONCAKE):
        where = "mooncake.yaml's model" if listed.key == "model" else f"mooncake.yaml's {listed.key}"
        title = f"engine: {listed.name} ({where}, as the server starts it)"
        _engine_section(report, title, partial(resolve_builtin_engine, settings.MOONCAKE, listed))
    for row in rows:
        how = "the console's restart applies" if row.builtin else "registered in the console"
        _engine_section(
            report, f"engine: {row.name} ({how})", partial(resolve_registered_engine, row, tuning)
        )
    _model_sources(report)
    _load_waits(report)
    # A models list is planned against the budget, and so is one model when a budget is set (the load
    # refuses what exceeds it); otherwise one model only for what its load would refuse.
    budget = memory_budget(tuning) if tuning is not None else settings.MOONCAKE_MEMORY_BUDGET_BYTES or None
    try:
        plan = plan_listed(
            settings.MOONCAKE,
            budget_bytes=budget,
            refusals_only=not is_list(settings.MOONCAKE) and budget is None,
        )
        report.problems.extend(plan.problems.values())
        report.lines.extend(f"memory plan:  {line}" for line in plan.sizes.values())
        if budget is not None or is_list(settings.MOONCAKE):
            report.lines.extend(f"memory plan:  {line}" for line in unsized(settings.MOONCAKE).values())
    except Exception as exc:  # the plan is advice; say why it is missing rather than fail the check
        logger.debug("Memory plan failed", exc_info=True)
        report.lines.append(f"memory plan:  not made ({type(exc).__name__}: {exc})")
    return report


def _engine_section(report: Report, title: str, resolve: Callable[[], ResolvedEngine]) -> None:
    try:
        resolved = resolve()
    except (ValueError, TypeError) as exc:
        report.problems.append(f"engine settings ({title.split(' (')[0].removeprefix('engine: ')}): {exc}")
        return
    report.lines.append(title)
    report.lines.append(f"  {'runs':<{NAME_WIDTH}}{native_path_label(resolved.config)}")
    report.lines.extend(_table(resolved.sources))
    if resolved.config.engine_type == "openai":
        _probe(report, title.split(" (")[0].removeprefix("engine: "), resolved)
    missing = not_installed_problem(resolved.config)  # a server Mooncake would start, not installed here
    if missing is not None:
        report.problems.append(missing)
    # Written for this model (the environment's engine variables apply to every model, so they are not).
    given = [name for name, sourced in resolved.sources.items() if sourced.source in ("yaml", "console")]
    unread = settings_not_read(resolved.config, given)
    if unread:
        origins = ", ".join(resolved.sources[name].describe() for name in unread)
        kind = resolved.config.engine_type
        report.problems.append(
            f"{title.split(' (')[0].removeprefix('engine: ')}: {', '.join(unread)} "
            f"{'does' if len(unread) == 1 else 'do'} not apply to engine type {kind!r}, which never reads "
            f"{'it' if len(unread) == 1 else 'them'} (set in {origins}); remove "
            f"{'it' if len(unread) == 1 else 'them'}"
        )


def _load_waits(report: Report) -> None:
    """How long a request waits for each of mooncake.yaml's models while it loads."""
    for model in listed_models(settings.MOONCAKE):
        wait = load_wait(settings.MOONCAKE, model.name)
        report.lines.append(f"load wait:    {model.name}: {wait.value:g} s, {wait.describe()}")


def _probe(report: Report, name: str, resolved: ResolvedEngine) -> None:
    remote = resolved.config.remote()
    key = (remote.base_url, remote.api_key, remote.upstream_model)
    known = report.probed.get(key)
    probe = known or probe_upstream(resolved.config, name)
    report.probed[key] = probe
    report.lines.append(f"  {'upstream':<{NAME_WIDTH}}{probe.line}")
    if known is None and probe.problem is not None:
        report.problems.append(probe.problem)


def _model_sources(report: Report) -> None:
    """Where each of mooncake.yaml's models loads from, and whether it is there."""
    listed = listed_models(settings.MOONCAKE)
    for model in listed:
        source = source_of(settings.MOONCAKE, model)
        hub = parse_hub_id(source)
        if hub is not None:
            engine_type = model.settings.get("type") or settings.MOONCAKE.get("engine", {}).get("type")
            line, problem = describe_hub(hub, str(engine_type or "native"))
            report.lines.append(f"model:        {model.name} <- {line}")
            if problem:
                report.problems.append(f"model{'' if len(listed) == 1 else ' ' + model.name}: {problem}")
            continue
        result = check_source(source)
        report.lines.append(f"model:        {model.name} <- {result.path or source}")
        if result.problem:
            report.problems.append(f"model{'' if len(listed) == 1 else ' ' + model.name}: {result.problem}")


def describe_hub(ref: HubRef, engine_type: str = "native") -> tuple[str, str | None]:
    """What `mooncake check` says of a hub model: where it is cached, or that it will be downloaded (and
    the problem, when downloads are off and it is not cached). Reads the cache only, never the network."""
    from huggingface_hub import constants

    found = cached(ref, patterns_for(engine_type))
    if found is not None:
        return f"{ref} (Hugging Face Hub, in the cache: {found})", None
    cache = hub_cache_dir()
    if constants.HF_HUB_OFFLINE:
        problem = f"{ref} is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE forbids downloads"
        return f"{ref} (Hugging Face Hub, not in the cache)", problem
    line = f"{ref} (Hugging Face Hub: downloaded from {constants.ENDPOINT} into {cache} at start)"
    return line, None


def _console_rows() -> tuple[EngineSettings | None, list[ModelRegistration], str | None]:
    """The console's rows, or why they could not be read (a database not migrated or not reachable)."""
    try:
        return EngineSettings.objects.order_by("pk").first(), list(ModelRegistration.objects.all()), None
    except DatabaseError as exc:
        logger.debug("Console rows not readable", exc_info=True)
        return None, [], f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; run migrate"


# Printed as set or not, never as their value.
SECRETS = frozenset({"api_key"})


def _table(sources: Mapping[str, Sourced]) -> list[str]:
    return [
        f"  {name:<{NAME_WIDTH}}{_show(sourced.value, secret=name in SECRETS):<{VALUE_WIDTH}} "
        f"{sourced.describe()}"
        for name, sourced in sources.items()
    ]


def _show(value: Any, *, secret: bool = False) -> str:
    if value is None:
        return "(none)"
    if secret:
        return "(set, hidden)"
    if isinstance(value, list | tuple):
        return ", ".join(_show(item) for item in value) or "(none)"
    return str(value)
