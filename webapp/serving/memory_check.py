"""mooncake.yaml's models planned against the memory budget before any loads (at start and in `check`).

The budget: the manager's (MOONCAKE_MEMORY_BUDGET_BYTES, or the console's tuning page) where one is set;
else, on CPU, the RAM available now; on a GPU each model's gpu_memory_utilization caps the device's use.
A hub id is sized from its snapshot when the Hugging Face cache holds it (never downloaded here). Models
whose size cannot be read (a missing path, a hub id not cached yet, a remote engine) are left to their
load's own error (`unsized` names the hub ones, whose size is known only once downloaded); a
max_model_len over the model's context, or over what an explicit kv_cache_memory_bytes holds, is a
problem here, as it would be at load.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from inference.api import ModelManagerClient
from inference.manager.memory_plan import Footprint, MemoryPlan, describe, plan_memory
from webapp.core.engine_config import base_layers, resolve_engine
from webapp.core.hub_models import MODEL_FILES, cached, parse_hub_id
from webapp.core.model_list import is_list, listed_models, source_of
from webapp.core.modelpaths import check_source

logger = logging.getLogger(__name__)

BUDGET_SOURCE = "the memory budget (MOONCAKE_MEMORY_BUDGET_BYTES or the console's tuning page)"


def plan_listed(
    mooncake: Mapping[str, Mapping[str, Any]],
    *,
    budget_bytes: int | None,
    names: Collection[str] | None = None,
    refusals_only: bool = False,
) -> MemoryPlan:
    """Plan mooncake.yaml's models (those in `names`, if given) in the file's order; `refusals_only`: only
    what each load would refuse (one model has no plan to fit, but can still ask for too long a context)."""
    # Function-local: reading a size needs the gguf reader, probing the device needs torch.
    from inference.manager.footprint import DeviceFacts, estimate, load_refusal, probe_device, read_shape

    footprints: list[Footprint] = []
    refused: dict[str, str] = {}
    device: DeviceFacts | None = None  # the first model's: one reading of the RAM for the whole plan
    for listed in listed_models(mooncake):
        if names is not None and listed.name not in names:
            continue
        try:
            config = resolve_engine(base_layers(mooncake, listed=listed)).config
        except (TypeError, ValueError):
            continue  # reported where the config is built
        path = model_files(source_of(mooncake, listed)) if config.engine_type == "native" else None
        if path is None:
            continue
        try:
            shape = read_shape(path)
        except Exception:
            logger.warning("Could not read the size of %s; not planned", listed.name, exc_info=True)
            continue
        # Each model's own CPU-kernel settings (cpu_isa among them); the checks run once per process.
        facts = probe_device(config.device, config.cpu_kernels())
        device = device or facts
        footprint = estimate(listed.name, listed.key, config, shape, facts)
        refusal = load_refusal(config, shape, footprint)
        if refusal is not None:  # the load would refuse it: said here first, and the model is not planned
            refused[listed.name] = f"{listed.name}: {refusal}"
            continue
        footprints.append(footprint)
    if device is None or refusals_only:
        return MemoryPlan(problems=refused, sizes={f.name: describe(f) for f in footprints})
    source = BUDGET_SOURCE
    if budget_bytes is None and device.kind == "cpu":
        budget_bytes, source = device.available_bytes, "the RAM available now"
    total = device.total_bytes if device.kind == "cuda" else None
    plan = plan_memory(footprints, budget_bytes=budget_bytes, budget_source=source, device_total_bytes=total)
    plan.problems.update(refused)
    return plan


def model_files(source: str) -> Path | None:
    """The files a native load of `source` reads, where they are here already: a local path, or a hub id's
    snapshot in the Hugging Face cache (None when it is not cached: its size is unknown until downloaded)."""
    hub = parse_hub_id(source)
    if hub is not None:
        return cached(hub, MODEL_FILES)
    found = check_source(source)
    return None if found.problem else found.path


def unsized(mooncake: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """mooncake.yaml's native models named by a hub id that is not cached yet, each with why the plan
    cannot size it: the budget is checked only when its load has downloaded it."""
    found: dict[str, str] = {}
    for listed in listed_models(mooncake):
        hub = parse_hub_id(source_of(mooncake, listed))
        if hub is None:
            continue
        try:
            config = resolve_engine(base_layers(mooncake, listed=listed)).config
        except (TypeError, ValueError):
            continue
        if config.engine_type == "native" and cached(hub, MODEL_FILES) is None:
            found[listed.name] = (
                f"{listed.name}: size unknown until downloaded ({hub} is not in the Hugging Face cache); "
                "the memory budget is checked when it loads"
            )
    return found


def start_names(manager: ModelManagerClient) -> list[str]:
    """What the server loads at start, in order: the default model; with a models list, every listed model
    (the default first only when it is not one of them: a default saved in the console)."""
    default = manager.default_name
    if not is_list(settings.MOONCAKE):
        return [default] if default else []
    known = {info.name for info in manager.list()}
    listed = [m.name for m in listed_models(settings.MOONCAKE) if m.name in known]
    return ([default] if default and default not in listed else []) + listed


def over_budget(manager: ModelManagerClient, names: Collection[str]) -> set[str]:
    """The listed models that do not fit, each logged with the reason and what would make it fit."""
    if not is_list(settings.MOONCAKE):
        return set()
    plan = plan_listed(settings.MOONCAKE, budget_bytes=manager.memory_budget_bytes, names=names)
    for message in plan.problems.values():
        logger.error("Not loading at start: %s", message)
    if manager.memory_budget_bytes is not None:
        for name, message in unsized(settings.MOONCAKE).items():
            if name in names:
                logger.warning("Not planned against the memory budget: %s", message)
    return set(plan.problems)
