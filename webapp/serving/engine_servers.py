"""Where the command of a server Mooncake starts (engine types vllm, sglang, tgi) is, or how to install it.

The engine package reads no environment, so PATH is looked up here and the result passed in.
`mooncake check` reports a missing engine as a problem; start-up marks the model failed with the same
sentence (EngineNotInstalledError, raised by the composition root).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

from inference.api import SUPERVISED_TYPES, EngineConfig

# The command each type runs when engine.executable does not say; sglang runs as `python -m`.
COMMANDS = {"vllm": "vllm", "tgi": "text-generation-launcher"}
INSTALL = {
    "vllm": "pip install vllm; it needs a CUDA GPU",
    "sglang": "pip install 'sglang[all]'; it needs a CUDA GPU",
    "tgi": "see https://huggingface.co/docs/text-generation-inference/installation; it needs a GPU",
}


class EngineNotInstalledError(ValueError):
    """The engine type's command is not there: the message says how to install it."""


def server_executable(config: EngineConfig) -> str:
    """The executable that starts config's server; EngineNotInstalledError when there is none."""
    kind = config.engine_type
    if kind not in SUPERVISED_TYPES:
        raise ValueError(f"engine type {kind!r} starts no server")
    executable = config.server().executable
    if executable is not None:
        path = shutil.which(executable)  # a path, or a command name to look up
        if path is None or not os.access(path, os.X_OK):
            raise EngineNotInstalledError(
                f"engine.type {kind}: engine.executable {executable!r} is not an executable file"
            )
        return path
    if kind == "sglang":
        # Installed into Mooncake's own Python: find_spec looks without importing (which takes seconds).
        if importlib.util.find_spec("sglang") is None:
            raise EngineNotInstalledError(
                f"engine.type sglang: the sglang package is not installed in {sys.executable} "
                f"({INSTALL[kind]}; or set engine.executable to a Python that has it)"
            )
        return sys.executable
    found = shutil.which(COMMANDS[kind])
    if found is None:
        raise EngineNotInstalledError(
            f"engine.type {kind}: the {COMMANDS[kind]} command is not installed ({INSTALL[kind]})"
        )
    return found


def not_installed_problem(config: EngineConfig) -> str | None:
    """`mooncake check`'s problem line for config's engine, or None (installed, or no server to start)."""
    if config.engine_type not in SUPERVISED_TYPES:
        return None
    try:
        server_executable(config)
    except EngineNotInstalledError as exc:
        return str(exc)
    return None
