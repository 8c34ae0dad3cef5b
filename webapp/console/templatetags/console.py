"""Filters for the console's tables."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django import template

register = template.Library()


@register.filter
def bytes(value: int | None) -> str:
    """1536 -> "1.5 KiB"; None -> "—"."""
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


@register.filter
def params(value: int | None) -> str:
    """134515008 -> "134.5 M"."""
    if not value:
        return "—"
    if value >= 1_000_000_000:
        return f"{value / 1e9:.2f} B"
    if value >= 1_000_000:
        return f"{value / 1e6:.1f} M"
    return f"{value:,}"


@register.filter
def any_busy(rows: Iterable[Any]) -> bool:
    return any(row.busy for row in rows)


@register.filter
def get_item(mapping: Mapping[Any, Any], key: Any) -> Any:
    return mapping.get(key)
