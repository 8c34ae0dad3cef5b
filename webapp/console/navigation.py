"""The console's tabs, and which one a page belongs to.

A page is matched by its URL name's prefix, so a form's POST that renders its page again (a register error
at models/register/) or a page added later (models/upload/) still lights its tab.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse


@dataclass(frozen=True, slots=True)
class Tab:
    url_name: str
    label: str
    prefixes: tuple[str, ...]  # URL names in console.urls that start with one of these belong to the tab


TABS = (
    Tab("index", "Overview", ("index",)),
    Tab("models", "Models", ("model",)),
    Tab("tuning", "Tuning", ("tuning",)),
    Tab("dashboard", "Metrics", ("dashboard",)),
    Tab("requests", "Requests", ("requests",)),
    Tab("users", "Users & keys", ("user", "key-")),
    Tab("groups", "Groups", ("group",)),
    Tab("usage", "Usage", ("usage",)),
    Tab("site", "Site", ("site",)),
    Tab("accounts", "Sign-ups & locks", ("account", "signup-", "lock-")),
    Tab("jobs", "Jobs", ("jobs",)),
    Tab("audit", "Audit log", ("audit",)),
    Tab("feedback", "Feedback", ("feedback",)),
)


def current_tab(url_name: str | None) -> Tab | None:
    """The tab a console page (by its URL name) belongs to; None for a name no tab claims."""
    name = url_name or ""
    return next((tab for tab in TABS if name.startswith(tab.prefixes)), None)


@dataclass(frozen=True, slots=True)
class TabLink:
    href: str
    label: str
    current: bool


def tab_links(url_name: str | None) -> list[TabLink]:
    current = current_tab(url_name)
    return [TabLink(reverse(f"console:{tab.url_name}"), tab.label, tab is current) for tab in TABS]
