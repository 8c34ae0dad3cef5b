"""Console actions raise no console error and no Content-Security-Policy violation (issue #47: about 14
"Applying inline style violates … style-src 'self'" errors per action: htmx settled a style attribute
that a script had set through CSSOM, with setAttribute, on every swap and every poll).

Loading a page was already checked (tests/webapp/core/test_csp_browser.py); these are the actions, at
1280 px: the overview, htmx swaps of the models table (save a model's defaults, unload and load it while
the table polls), a register form's error (which lights the Models tab), the metrics charts drawing and
rebuilding in the other theme, saving a user's limits (a toast), and the other tabs. Every console error,
every console message that names the policy, every securitypolicyviolation event and every uncaught page
error fails the test, named by its step.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "csp-actions", "csp-actions-password-1"
DESKTOP = {"width": 1280, "height": 900}
# Every violation the document reports, from scripts run after load too (htmx swaps, charts).
LISTEN = """window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(
  `${e.violatedDirective} ${e.blockedURI || "inline"} at ${e.sourceFile || "?"}:${e.lineNumber || 0}`
));"""


# The console tabs that the toasts' box overlaps.
COVERED_TABS = """() => {
  const toast = document.getElementById("toasts").getBoundingClientRect();
  return [...document.querySelectorAll(".console-nav a")].filter((a) => {
    const tab = a.getBoundingClientRect();
    const across = tab.left < toast.right && toast.left < tab.right;
    return across && tab.top < toast.bottom && toast.top < tab.bottom;
  }).map((a) => a.textContent);
}"""


class Problems:
    """Console errors, page errors and CSP violations, each tagged with the step it happened in."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.step = "log in"
        self.found: list[str] = []
        self.allowed: tuple[str, ...] = ()  # messages the current step may log (each named where it is set)
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.found.append(f"{self.step}: page error {exc}"))

    def _console(self, message: Any) -> None:
        if any(text in message.text for text in self.allowed):
            return
        if message.type == "error" or "Content Security Policy" in message.text:
            self.found.append(f"{self.step}: console {message.type}: {message.text}")
        if message.type == "error" and "Content Security Policy" in message.text:
            self.found.append(f"{self.step}:   at {message.location}")

    def during(self, step: str, *, allowed: tuple[str, ...] = ()) -> None:
        self.collect()
        self.step, self.allowed = step, allowed

    def collect(self) -> None:
        try:
            violations = self.page.evaluate("() => (window.__csp || []).splice(0)")
        except Exception:  # a navigation in flight: its document's list is read at the next step
            violations = []
        self.found += [f"{self.step}: violation {v}" for v in violations]


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD, staff=True)
    return daphne_server


@pytest.fixture
def page(browser: Any, server: LiveDaphne) -> Iterator[Any]:
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(60_000)
    context.add_init_script(LISTEN)
    page = context.new_page()
    yield page
    context.close()


def settle(page: Any) -> None:
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)  # a swap's settle, a chart's first draw


def test_console_actions_raise_no_console_error(page: Any, server: LiveDaphne) -> None:
    problems = Problems(page)
    page.goto(server.url + "/login/?next=/console/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(r"/console/$"))
    problems.during("overview")
    assert page.locator("[data-figure=models-loaded]").is_visible()
    settle(page)

    problems.during("models page")
    page.click("nav.console-nav >> text=Models")
    page.wait_for_url(re.compile(r"/console/models/$"))
    settle(page)
    row = page.locator("tr[data-model][data-state=loaded]").first
    model = row.get_attribute("data-model")
    assert model

    # A script's style set through CSSOM (a progress bar's width, say) is allowed; htmx used to copy it onto
    # the swapped-in element of the same id with setAttribute("style"), one refusal per swap or poll.
    problems.during("open and save a model's defaults (htmx swap of an element styled through CSSOM)")
    page.evaluate("document.getElementById('models-live').style.opacity = '0.99'")
    defaults = page.locator("tr.defaults-row details").first
    defaults.locator("summary").click()
    defaults.locator("form.defaults-form [type=submit]").click()
    settle(page)

    problems.during("unload, then load (the table polls every second while busy)")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Unload").click()
    page.wait_for_selector(f"tr[data-model='{model}'][data-state=available]", timeout=60_000)
    page.locator(f"tr[data-model='{model}']").get_by_role("button", name="Load").click()
    page.wait_for_selector(f"tr[data-model='{model}'][data-state=loaded]", timeout=180_000)
    page.wait_for_selector("#models-live[data-busy=false]", timeout=10_000)
    settle(page)

    # A refused form comes back to the models page by a redirect: no failed load is logged, the URL is right.
    problems.during("register error")
    page.fill("#register-local input[name=name]", "no-such-model")
    page.fill("#register-local input[name=path]", "/nowhere/at/all.gguf")
    page.click("#register-local [type=submit]")
    settle(page)
    assert page.locator("nav.console-nav a[aria-current=page]").inner_text() == "Models"
    assert page.url == server.url + "/console/models/"
    assert page.locator("#register-local .errorlist").count() >= 1

    problems.during("metrics charts")
    page.goto(server.url + "/console/metrics/")
    page.wait_for_function("() => Number(document.getElementById('dashboard').dataset.samples) >= 2")
    problems.during("metrics charts in the other theme")
    page.click("#theme-toggle")
    page.wait_for_timeout(1_500)
    page.click("#theme-toggle")
    page.wait_for_timeout(500)

    problems.during("save a user's limits (a toast)")
    page.click("nav.console-nav >> text=Users & keys")
    page.wait_for_url(re.compile(r"/console/users/$"))
    page.locator("a[href^='/console/users/']", has_text=USER).first.click()
    page.wait_for_selector("#user-limits")
    page.click("#user-limits [type=submit]")
    page.wait_for_selector("#toasts .message")
    # The toast floats where it covers no tab (it sat over Jobs and Audit log at the top right).
    assert page.evaluate(COVERED_TABS) == []
    page.locator("#toasts .message-close").click()
    settle(page)

    for path in ("/console/tuning/", "/console/requests/", "/console/jobs/", "/console/audit/", "/console/"):
        problems.during(f"open {path}")
        page.goto(server.url + path)
        settle(page)
    problems.collect()
    assert problems.found == []
