"""Engine settings the environment gives: a few variables, and the upstream's API key named by
engine.api_key_env (so the key need not sit in mooncake.yaml). The engine itself reads no environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from inference.api import EngineConfig
from webapp.core.sourced import Sourced

# cache_dir comes from the data-directory section (MOONCAKE_CACHE_DIR), not from here.
ENGINE_ENV = {
    "cpu_threads": "MOONCAKE_CPU_THREADS",
    "gguf_kernels": "MOONCAKE_GGUF_KERNELS",
    "gguf_amx_decode": "MOONCAKE_GGUF_AMX_DECODE",
    "kquant_activations": "MOONCAKE_KQUANT_ACTIVATIONS",
    "gguf_dense_copy": "MOONCAKE_GGUF_DENSE_COPY",
    "kernel_compiler": "CXX",
    "cpu_isa": "MOONCAKE_CPU_ISA",
    "kv_cache_dtype": "MOONCAKE_KV_CACHE_DTYPE",
}
# The variables' names before the settings were renamed, still read (the new name wins where both are set).
ENGINE_ENV_ALIASES = {"MOONCAKE_Q4_DECODE": "gguf_kernels", "MOONCAKE_Q4_AMX": "gguf_amx_decode"}


def engine_environment(engine: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Sourced]:
    """The engine fields set by the environment, each checked now (at start-up, naming the variable)."""
    named = [(v, k) for v, k in ENGINE_ENV_ALIASES.items()] + [(v, k) for k, v in ENGINE_ENV.items()]
    found = {k: Sourced(value=env[v], source="env", origin=v) for v, k in named if v in env}
    for name, sourced in found.items():
        try:
            EngineConfig.from_dict({name: sourced.value})
        except ValueError as exc:
            raise ImproperlyConfigured(f"{sourced.origin}={sourced.value!r}: {exc}") from None
    return found | _api_key_from_env(engine, env)


def _api_key_from_env(engine: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Sourced]:
    name = engine.get("api_key_env")
    if name is None:
        return {}
    if not isinstance(name, str) or not name.strip():
        raise ImproperlyConfigured(f"engine.api_key_env must name an environment variable, got {name!r}.")
    if engine.get("api_key") is not None:
        raise ImproperlyConfigured("engine.api_key and engine.api_key_env are both set; keep one.")
    if name not in env:
        raise ImproperlyConfigured(f"engine.api_key_env names {name}, which is not set in the environment.")
    return {"api_key": Sourced(value=env[name], source="env", origin=name)}
