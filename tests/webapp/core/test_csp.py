"""A strict Content-Security-Policy on HTML pages, and templates that need nothing looser."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from webapp.asgi import application
from webapp.core.csp import HEADER, POLICY

pytestmark = pytest.mark.django_db

TEMPLATE_DIRS = [
    Path(settings.BASE_DIR) / "templates",
    *Path(settings.BASE_DIR, "webapp").glob("*/templates"),
]
# A <script> without src= (an inline block), an on*= event handler, a style= attribute or <style> block,
# or a javascript: URL: each needs 'unsafe-inline' (or eval), which the policy withholds.
INLINE = {
    "inline <script>": re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I),
    "event handler": re.compile(r"<[^>]*\son[a-z]+\s*=", re.I),
    "style attribute": re.compile(r"<[^>]*\sstyle\s*=", re.I),
    "<style> block": re.compile(r"<style\b", re.I),
    "javascript: URL": re.compile(r"javascript:", re.I),
    "htmx hx-on": re.compile(r"\shx-on[:-]", re.I),
}


def test_policy_is_strict() -> None:
    assert "unsafe-inline" not in POLICY and "unsafe-eval" not in POLICY
    for directive in (
        "default-src 'self'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ):
        assert directive in POLICY
    assert settings.MIDDLEWARE[-1] == "webapp.core.csp.csp_middleware"


def test_templates_have_nothing_inline() -> None:
    templates = [p for d in TEMPLATE_DIRS for p in d.rglob("*.html")]
    assert len(templates) > 10
    found = [
        f"{path.relative_to(settings.BASE_DIR)}: {kind}"
        for path in templates
        for kind, pattern in INLINE.items()
        if pattern.search(path.read_text())
    ]
    assert found == []


def test_the_check_catches_an_inline_script() -> None:
    assert INLINE["inline <script>"].search("<p>x</p><script>alert(1)</script>")
    assert not INLINE["inline <script>"].search('<script src="/static/a.js" defer></script>')
    assert INLINE["event handler"].search('<button onclick="go()">')
    assert INLINE["style attribute"].search('<div style="color: red">')


def test_html_pages_carry_the_policy(client: Client) -> None:
    setup = client.get("/setup/")  # no account yet: the page asking for the setup link's token
    get_user_model().objects.create_user("ann", "ann@example.com", "pw-123456789")
    login = client.get("/login/")
    for response in (setup, login):
        assert response["Content-Type"].startswith("text/html")
        assert response[HEADER] == POLICY


def test_json_answers_carry_none(client: Client) -> None:
    response = client.get("/version")
    assert response.status_code == 200 and HEADER not in response


@pytest.mark.django_db(transaction=True)
async def test_the_api_docs_page_carries_the_policy_through_the_api_handler() -> None:
    # API paths run settings.API_MIDDLEWARE (webapp.core.api_asgi), not the test client's MIDDLEWARE: go
    # through the ASGI application the server runs.
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
        docs = await api.get("/v1/docs")
        models = await api.get("/v1/models")
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assert docs.headers[HEADER] == POLICY
    assert models.headers["content-type"] == "application/json" and HEADER not in models.headers
