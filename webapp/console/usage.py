"""The usage report: tokens and requests per day, user, group, model or source over a date range.

It reads the daily usage rows every finished request (API or chat) adds to, so it stays whole after the
request log's detail is pruned. A user in two groups counts in both groups' rows (each group's total is
what its members used), so the per-group rows may add up to more than the whole.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from webapp.accounts.models import DailyUsage
from webapp.accounts.selectors import UsageTotals, usage_totals

DEFAULT_DAYS = 30
_KEYS = {
    "day": "date",
    "user": "user__username",
    "group": "user__groups__name",
    "model": "model",
    "source": "source",
}


@dataclass(frozen=True, slots=True)
class UsageQuery:
    start: dt.date
    end: dt.date
    by: str = "day"
    user: str = ""
    group: str = ""
    model: str = ""
    source: str = ""
    sort: str = ""

    @classmethod
    def from_form(cls, data: dict[str, Any], *, today: dt.date | None = None) -> UsageQuery:
        end = data.get("end") or today or timezone.now().astimezone(dt.UTC).date()
        start = data.get("start") or end - dt.timedelta(days=DEFAULT_DAYS - 1)
        by = data.get("by") or "day"
        text = {
            name: str(data.get(name) or "").strip() for name in ("user", "group", "model", "source", "sort")
        }
        return cls(start=start, end=end, by=by, **text)


@dataclass(slots=True)
class UsageReport:
    query: UsageQuery
    rows: list[UsageTotals] = field(default_factory=list)
    days: list[UsageTotals] = field(default_factory=list)  # every day of the range, for the chart

    @property
    def total(self) -> UsageTotals:
        return UsageTotals(
            key="total",
            requests=sum(r.requests for r in self.days),
            errors=sum(r.errors for r in self.days),
            prompt_tokens=sum(r.prompt_tokens for r in self.days),
            completion_tokens=sum(r.completion_tokens for r in self.days),
        )


def _rows(query: UsageQuery) -> QuerySet[DailyUsage]:
    rows = DailyUsage.objects.filter(date__gte=query.start, date__lte=query.end)
    if query.user:
        rows = rows.filter(user__username__iexact=query.user)
    if query.group:  # a subquery, not a join: each usage row stays one row
        rows = rows.filter(user__in=User.objects.filter(groups__name__iexact=query.group))
    if query.model:
        rows = rows.filter(model=query.model)
    if query.source:
        rows = rows.filter(source=query.source)
    return rows


def _sorted(rows: list[UsageTotals], sort: str) -> list[UsageTotals]:
    name = sort.lstrip("-")
    if not name:
        return rows
    reverse = sort.startswith("-")
    if name == "key":
        return sorted(rows, key=lambda r: r.key, reverse=reverse)
    return sorted(rows, key=lambda r: (getattr(r, name), r.key), reverse=reverse)


def usage_report(query: UsageQuery) -> UsageReport:
    rows = _rows(query)
    breakdown = usage_totals(rows, by=_KEYS[query.by])
    per_day = {row.key: row for row in usage_totals(rows, by="date")}
    days = []
    day = query.start
    while day <= query.end:
        days.append(per_day.get(day.isoformat(), UsageTotals(day.isoformat(), 0, 0, 0, 0)))
        day += dt.timedelta(days=1)
    return UsageReport(query=query, rows=_sorted(breakdown, query.sort), days=days)


def usage_csv(report: UsageReport) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        [report.query.by, "requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens"]
    )
    for row in report.rows:
        writer.writerow(
            [
                _csv_safe(row.key),
                row.requests,
                row.errors,
                row.prompt_tokens,
                row.completion_tokens,
                row.total_tokens,
            ]
        )
    return out.getvalue()


def _csv_safe(text: str) -> str:
    """A cell a spreadsheet shows as text: user and model names must never run as formulas."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def chart_bars(days: list[UsageTotals], *, width: int = 720, height: int = 160) -> list[dict[str, Any]]:
    """SVG bar geometry for tokens per day (prompt below, generated on top), scaled to the busiest day."""
    peak = max((d.total_tokens for d in days), default=0) or 1
    step = width / max(len(days), 1)
    bars = []
    for i, d in enumerate(days):
        prompt_h = d.prompt_tokens / peak * height
        completion_h = d.completion_tokens / peak * height
        bars.append(
            {
                "x": round(i * step + step * 0.1, 1),
                "w": round(step * 0.8, 1),
                "prompt_y": round(height - prompt_h, 1),
                "prompt_h": round(prompt_h, 1),
                "completion_y": round(height - prompt_h - completion_h, 1),
                "completion_h": round(completion_h, 1),
                "row": d,
            }
        )
    return bars
