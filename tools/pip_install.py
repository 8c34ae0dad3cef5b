"""`pip install ARGS` for `make install`, done by uv where it is installed: seconds where pip takes minutes.

uv reads no pip configuration, so what pip would use on this machine (`pip config list`: the config
files and PIP_* variables) is handed on: indexes, find-links, constraints, the certificate bundle and the
timeout. With more than one index, uv takes the best version across all of them, as pip does. Without uv
(a platform it has no wheel for), pip itself installs.

Usage: python tools/pip_install.py ARGS...   (run with the virtual environment's Python)
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

# pip option -> uv option; each takes a whitespace-separated list in pip's configuration.
LIST_OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_settings(python: str) -> dict[str, str]:
    """pip's effective settings by name; the environment's (`:env:`) win over the files', as in pip."""
    listing = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    files: dict[str, str] = {}
    environment: dict[str, str] = {}
    for line in listing.splitlines():
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        scope, _, name = key.rpartition(".")
        try:
            value = str(ast.literal_eval(raw))  # pip prints each value as a Python string literal
        except (SyntaxError, ValueError):
            value = raw.strip("'\"")
        (environment if scope == ":env:" else files)[name] = value
    return {**files, **environment}


def uv_command(uv: str, python: str, settings: dict[str, str], args: list[str]) -> list[str]:
    # Bytecode compiled at install, as pip does: otherwise each process's first imports compile torch,
    # transformers and Django from source, in every test worker and server started at once.
    command = [uv, "pip", "install", "--python", python, "--compile-bytecode"]
    for name, option in LIST_OPTIONS.items():
        for value in settings.get(name, "").split():
            command += [option, value]
    if settings.get("extra-index-url"):
        command += ["--index-strategy", "unsafe-best-match"]
    return [*command, *args]


def uv_environment(settings: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    if settings.get("cert"):
        env.setdefault("SSL_CERT_FILE", settings["cert"])
    if settings.get("timeout") or settings.get("default-timeout"):
        env.setdefault("UV_HTTP_TIMEOUT", settings.get("timeout") or settings["default-timeout"])
    return env


def main(args: list[str]) -> int:
    python = sys.executable
    uv = shutil.which("uv", path=str(Path(python).parent))
    if uv is None:
        return subprocess.call([python, "-m", "pip", "install", *args])
    settings = pip_settings(python)
    command = uv_command(uv, python, settings, args)
    print(" ".join(command), flush=True)
    return subprocess.call(command, env=uv_environment(settings))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
