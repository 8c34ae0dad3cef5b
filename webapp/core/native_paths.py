"""Each model's line on whether it runs natively and how (inference.manager.native_path), as `mooncake check`
and the console's Models page show it: its files found where its load would find them, on the device the
process runs native models on."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from inference.api import CpuKernelConfig, EngineConfig
from inference.manager.native_path import native_path
from webapp.core.hub_models import cached, parse_hub_id, patterns_for
from webapp.core.modelpaths import check_source

if TYPE_CHECKING:
    from inference.manager.footprint import DeviceFacts

logger = logging.getLogger(__name__)


def native_path_label(config: EngineConfig) -> str:
    """One line; never raises (what it cannot find out, it says it does not know)."""
    try:
        native = config.engine_type == "native"
        device = device_facts(config.device, config.cpu_kernels()) if native else None
        return native_path(model_files(config), config, device).label
    except Exception as exc:  # a line of a report: say why it is missing rather than fail the page
        logger.debug("Native path of %s not known", config.model, exc_info=True)
        return f"not known ({type(exc).__name__}: {exc})"


@lru_cache(maxsize=8)
def device_facts(device: str, kernels: CpuKernelConfig) -> DeviceFacts | None:
    """What EngineConfig.device resolves to here (imports torch): the kind and the CPU's kernels, which do
    not change while the process runs. None where it cannot be probed."""
    from inference.manager.footprint import probe_device

    try:
        return probe_device(device, kernels)
    except Exception:
        logger.warning("Could not probe device %r", device, exc_info=True)
        return None


def model_files(config: EngineConfig) -> Path | None:
    """The folder or .gguf an in-process engine loads (a hub model only once it is in the cache)."""
    if config.engine_type not in ("native", "transformers"):
        return None
    hub = parse_hub_id(config.model)
    if hub is not None:
        return cached(hub, patterns_for(config.engine_type))
    return check_source(config.model).path
