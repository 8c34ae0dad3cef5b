"""How xdist shares the suites between its workers (`make test` runs them with `--dist loadfile`).

A file at a time, as loadfile does, except that the suites on the session's models-list server go to one
worker together (a second worker would start a second copy of it), and the slowest files are handed out
first, so that no worker is left running a long file alone at the end. Without xdist only the order
changes.
"""

from __future__ import annotations

from typing import Any

import pytest

MODELS_LIST_SUITES = (
    "tests/webapp/test_model_list_live.py",
    "tests/webapp/test_speculative_live.py",
    "tests/webapp/test_transformers_engine_live.py",
)
# Measured on the 2-core CI machine: each takes one to three minutes.
SLOWEST_FIRST = (
    "tests/webapp/test_replicas_e2e.py",
    *MODELS_LIST_SUITES,
    "tests/webapp/test_first_day.py",
    "tests/webapp/test_graceful_stop.py",
    "tests/webapp/core/test_hub_live.py",
    "tests/webapp/test_openai_engine.py",
    "tests/webapp/test_phone_layout.py",
    "tests/webapp/api/test_conformance.py",
    "tests/inference/core/test_engine_real.py",
    # and in the unit step, where most files take seconds:
    "tests/inference/models/kernels/test_build.py",
    "tests/inference/models/quantization/gguf/test_fused_layers.py",
    "tests/webapp/core/test_cli.py",
    "tests/inference/models/layers/test_triton_attention.py",
    "tests/webapp/core/test_model_list.py",
)
_SCOPES = {path: "models-list-server" for path in MODELS_LIST_SUITES}
# The reliability step collects only this folder (collecting the whole suite costs a process 15 s), and
# the live step leaves reliability tests out: one marked anywhere else would run in no step.
RELIABILITY_DIR = "tests/reliability/"


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    strays = [
        item.nodeid
        for item in items
        if item.get_closest_marker("reliability") and not item.nodeid.startswith(RELIABILITY_DIR)
    ]
    if strays:
        raise pytest.UsageError(f"reliability tests belong in {RELIABILITY_DIR} (run there alone): {strays}")
    rank = {path: index for index, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(_file(item.nodeid), len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedServerScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = _file(nodeid)
            return _SCOPES.get(path, path)

    return SharedServerScheduling(config, log)
