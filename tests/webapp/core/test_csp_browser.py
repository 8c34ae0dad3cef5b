"""The pages work under their Content-Security-Policy in a real browser: no violation on any of them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "csp-e2e", "csp-e2e-password-1"
PAGES = [
    "/chat/",
    "/console/",
    "/console/models/",
    "/console/requests/",
    "/console/users/",
    "/console/tuning/",
    "/v1/docs",  # Swagger UI, served by the API's own handler (settings.API_MIDDLEWARE)
]
# Collects every violation the page reports, including ones from scripts run after load (htmx swaps).
LISTEN = """window.__csp = [];
document.addEventListener(
  "securitypolicyviolation", e => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`)
);"""


def test_no_page_violates_the_policy(browser: Any, daphne_server: LiveDaphne) -> None:
    daphne_server.create_user(USER, PASSWORD, staff=True)
    context = browser.new_context()
    context.set_default_timeout(60_000)
    context.add_init_script(LISTEN)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda msg: console.append(msg.text))
    page.goto(daphne_server.url + "/login/?next=/chat/")
    assert page.evaluate("() => window.__csp") == []
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    for path in PAGES:
        response = page.goto(daphne_server.url + path)
        assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        assert page.evaluate("() => window.__csp") == [], path
    assert not [text for text in console if "Content Security Policy" in text]
    context.close()
