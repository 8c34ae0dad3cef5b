"""The console's tab bar (console.navigation) for console/base.html."""

from __future__ import annotations

from django import template
from django.http import HttpRequest

from webapp.console.navigation import TabLink, tab_links

register = template.Library()


@register.simple_tag
def console_tabs(request: HttpRequest) -> list[TabLink]:
    match = request.resolver_match
    return tab_links(match.url_name if match is not None else None)
