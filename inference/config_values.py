"""Values from mooncake.yaml and the environment (strings there) as EngineConfig's typed fields, and the
field declaration that carries each setting's description (docs/configuration/reference.md is made from it).
"""

from __future__ import annotations

import os
import shlex
import types
import typing
from dataclasses import field
from typing import Any

from inference.speculative_config import SpeculativeConfig

# Field metadata keys: the one-line description users read, and the values a string setting may take.
DOC = "doc"
CHOICES = "choices"


def setting(default: Any, doc: str, *, choices: tuple[str, ...] = (), secret: bool = False) -> Any:
    """A dataclass field with its description, kept beside the field rather than in a table that drifts
    from it; a secret is left out of the dataclass's repr."""
    return field(default=default, repr=not secret, metadata={DOC: doc, CHOICES: choices})


def coerce(name: str, value: Any, hint: Any) -> Any:
    """`value` as the EngineConfig field `name` of type `hint` holds it; errors name the field."""
    optional = isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)
    base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if optional else hint
    if value is None or (
        optional and isinstance(value, str) and value.strip().lower() in ("", "none", "null")
    ):
        if optional:
            return None
        raise ValueError(f"{name} must not be empty")
    if base is SpeculativeConfig:
        return SpeculativeConfig.from_value(value)  # its own errors name the key that is wrong
    try:
        if base is bool:
            if isinstance(value, str):
                if value.strip().lower() in ("1", "true", "yes", "on"):
                    return True
                if value.strip().lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if base is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if base is float:
            return float(value)
        if typing.get_origin(base) is tuple and name == "extra_args":  # a list, or one shell-quoted string
            return tuple(
                str(part) for part in (value if isinstance(value, list | tuple) else shlex.split(value))
            )
        if typing.get_origin(base) is tuple:  # model_roots: a list, or one string of os.pathsep-joined paths
            parts = value if isinstance(value, list | tuple) else str(value).split(os.pathsep)
            return tuple(str(part) for part in parts if str(part))
        return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: cannot use {value!r} as {getattr(base, '__name__', base)}") from None
