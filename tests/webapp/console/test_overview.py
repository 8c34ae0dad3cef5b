"""/console/ is an overview page (issue #47: it only redirected), and each console page lights its tab."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from inference import ModelManager
from webapp.accounts.models import RequestLog
from webapp.console.models import AuditLog
from webapp.console.navigation import TABS, current_tab


def figure(page: str, name: str) -> str:
    found = re.search(rf'data-figure="{name}"[^>]*>(.*?)</(?:p|span)>', page, re.S)
    assert found, name
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_console_root_is_an_overview_not_a_redirect(
    staff_client: Client, staff: User, manager: ModelManager
) -> None:
    manager.load("base")
    for status in (200, 200, 400, 429, 503):
        RequestLog.objects.create(endpoint="/v1/completions", status_code=status, duration_s=0.1)
    AuditLog.objects.create(actor=staff, action="model.register", target="smollm2")

    response = staff_client.get("/console/")
    assert response.status_code == 200
    page = response.content.decode()
    assert figure(page, "models-loaded") == "1 of 1 loaded"
    assert figure(page, "requests") == "5 requests"
    assert figure(page, "server-errors") == "1 server error (5xx)"
    assert figure(page, "client-errors") == "2 client errors (4xx)"
    assert figure(page, "users") == "1 active account"
    assert "model.register" in page and "smollm2" in page
    assert '<a href="/console/" aria-current="page">Overview</a>' in page
    for name in ("models", "dashboard", "requests", "users", "jobs", "audit"):  # each card links its tab
        assert f'href="{reverse(f"console:{name}")}"' in page


def test_overview_is_staff_only(client: Client, plain: User) -> None:
    client.force_login(plain)
    assert client.get("/console/").status_code == 403


def test_old_console_urls_still_answer(staff_client: Client, manager: ModelManager) -> None:
    for path in ("/console/models/", "/console/metrics/", "/console/jobs/", "/console/audit/"):
        assert staff_client.get(path).status_code == 200, path


@pytest.mark.parametrize(
    ("url_name", "tab"),
    [
        ("index", "Overview"),
        ("models", "Models"),
        ("model-register", "Models"),  # a register form's errors render the models page at its POST URL
        ("model-upload", "Models"),  # a page added later under models/
        ("user", "Users & keys"),
        ("key-create", "Users & keys"),
        ("group", "Groups"),
        ("signup-settings", "Sign-ups & locks"),
        ("lock-release", "Sign-ups & locks"),
        ("feedback-chat", "Feedback"),
        ("dashboard", "Metrics"),
    ],
)
def test_each_page_lights_its_tab(url_name: str, tab: str) -> None:
    found = current_tab(url_name)
    assert found is not None and found.label == tab


def test_every_tab_links_a_console_page(staff_client: Client, manager: ModelManager) -> None:
    page = staff_client.get(reverse("console:jobs")).content.decode()
    nav = page[
        page.index('<nav class="console-nav"') : page.index("</nav>", page.index('class="console-nav"'))
    ]
    assert re.findall(r"<a [^>]*>([^<]+)</a>", nav) == [tab.label.replace("&", "&amp;") for tab in TABS]
    assert nav.count('aria-current="page"') == 1 and '<a href="/console/jobs/" aria-current="page">' in nav


def test_register_error_lights_the_models_tab(staff_client: Client, manager: ModelManager) -> None:
    response = staff_client.post(reverse("console:model-register"), {"name": "", "path": ""})
    assert response.status_code == 302 and response["Location"] == reverse("console:models")
    page = staff_client.get(response["Location"]).content.decode()
    assert '<a href="/console/models/" aria-current="page">Models</a>' in page
    assert 'class="errorlist' in page
