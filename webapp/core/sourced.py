"""A configuration value together with where it came from: what `mooncake check` prints per setting."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Source = Literal["default", "env", "yaml", "console"]


class Sourced(BaseModel):
    """One effective value and where it came from (origin: the variable, yaml key or console page)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    value: Any
    source: Source
    origin: str = ""

    def describe(self) -> str:
        return f"{self.source} ({self.origin})" if self.origin else self.source
