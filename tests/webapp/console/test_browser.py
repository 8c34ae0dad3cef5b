"""The console in a real browser (Debian's Chromium) against a live Daphne and the real model.

Unload and reload the default model from the models table (the row's state updates live through htmx polling),
then watch the metrics dashboard move while a small, bounded load generator runs.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "console-e2e", "console-e2e-password-1"
# Each worker sends requests until the dashboard has seen them (or MAX_REQUESTS_EACH): a fixed small load
# can finish between two of the dashboard's one-second samples on a fast engine.
WORKERS, MAX_REQUESTS_EACH, MAX_TOKENS = 2, 20, 32


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD, staff=True)
    return daphne_server


def shot(page: Any, name: str) -> None:
    """MOONCAKE_CONSOLE_SCREENSHOTS=<dir> saves what the browser saw (for reviewing the look)."""
    folder = os.environ.get("MOONCAKE_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=True)


def log_in(browser: Any, server: LiveDaphne) -> Any:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(server.url + "/login/?next=/console/models/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(r"/console/models/$"))
    return page


def generate_load(server: LiveDaphne, model: str, results: list[int | str], seen: threading.Event) -> None:
    body = json.dumps({"model": model, "prompt": "Once upon a time", "max_tokens": MAX_TOKENS}).encode()
    for _ in range(MAX_REQUESTS_EACH):
        if seen.is_set():
            return
        request = urllib.request.Request(
            server.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                results.append(int(response.status))
        except Exception as exc:  # reported by the assertion below, not lost in the thread
            results.append(f"{type(exc).__name__}: {exc} after {time.monotonic() - started:.1f}s")


def test_unload_reload_and_live_dashboard(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server)
    row = page.locator("tr[data-model][data-state=loaded]").first
    model = row.get_attribute("data-model")
    assert model

    # Unload, once confirmed: the button swaps the table, which then polls until the model is available again.
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    row.get_by_role("button", name="Unload").click()
    page.wait_for_selector(f"tr[data-model='{model}'][data-state=available]", timeout=60_000)
    assert asked == [f"Unload {model}?"]
    assert (
        page.locator(f"tr[data-model='{model}'] .badge.state-available").inner_text()
        == "not loaded (loads when picked)"
    )
    assert server.get("/health")[0] == 503
    page.locator(f"tr[data-model='{model}']").get_by_role("button", name="Load").click()
    page.wait_for_selector(f"tr[data-model='{model}'][data-state=loading]", timeout=10_000)
    page.wait_for_selector(f"tr[data-model='{model}'][data-state=loaded]", timeout=180_000)
    page.wait_for_selector("#models-live[data-busy=false]", timeout=10_000)
    assert server.get("/health")[0] == 200
    shot(page, "console-models.png")

    # The dashboard: seven uPlot charts, refreshed every second, moving while requests run.
    page.goto(server.url + "/console/metrics/")
    page.wait_for_function("() => Number(document.getElementById('dashboard').dataset.samples) >= 2")
    assert page.locator("#dashboard .uplot").count() == 7
    results: list[int | str] = []
    seen = threading.Event()
    workers = [
        threading.Thread(target=generate_load, args=(server, model, results, seen)) for _ in range(WORKERS)
    ]
    for worker in workers:
        worker.start()
    try:
        page.wait_for_function(
            "() => { const d = document.getElementById('dashboard').dataset;"
            " return Number(d.maxRunning) >= 1 && Number(d.lastTokensPerS) > 0; }",
            timeout=120_000,
        )
        assert float(page.inner_text("#stat-tokens_per_s")) > 0
        shot(page, "console-dashboard.png")
    finally:
        seen.set()
        for worker in workers:
            worker.join(timeout=180)
    assert results and results == [200] * len(results)
    page.click("#theme-toggle")  # the charts rebuild in the other theme's colours and keep updating
    page.wait_for_timeout(300)
    assert page.locator("#dashboard .uplot").count() == 7
    shot(page, "console-dashboard-theme.png")
    # The newest sample's time, not the count: the window holds 300 samples, and a server up for more than
    # five minutes (the session-wide one, in a long run) keeps it full.
    newest_before = float(page.evaluate("document.getElementById('dashboard').dataset.lastSampleT"))
    page.wait_for_timeout(2_500)
    assert float(page.evaluate("document.getElementById('dashboard').dataset.lastSampleT")) > newest_before
    assert page.inner_text("#stat-rss_mb") != "\u2013"  # the placeholder dash
    for path, name in (
        ("/console/tuning/", "console-tuning.png"),
        ("/console/requests/", "console-requests.png"),
    ):
        page.goto(server.url + path)
        shot(page, name)
