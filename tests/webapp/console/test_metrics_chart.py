"""The metrics charts' time axis in a real browser (issue #17, defect 5).

On first load the dashboard has one sample. uPlot pads a single point's range by the size of the value, and
a Unix time in seconds is about 1.8e9: the axis ran from this year to two years on ("Jun 2027 … Jun 2029").
dashboard.js now gives the time scale a window of at least a minute ending at the newest sample; each chart
records the span it draws (data-x-min / data-x-max, Unix seconds) for this test to read.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "metrics-axis", "metrics-axis-password-1"
CHARTS = ("throughput", "queue", "kv", "ttft", "itl", "events", "process")
PHONE = {"width": 390, "height": 844}

# Each chart's drawn span, next to the browser's clock and calendar.
SPANS = """() => {
  const now = Date.now() / 1000;
  const day = (s) => new Date(s * 1000).toDateString();
  return [...document.querySelectorAll("#dashboard [data-chart]")].map((f) => ({
    chart: f.dataset.chart, min: Number(f.dataset.xMin), max: Number(f.dataset.xMax), now,
    minDay: day(Number(f.dataset.xMin)), maxDay: day(Number(f.dataset.xMax)), today: day(now),
  }));
}"""


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD, staff=True)
    return daphne_server


def open_dashboard(browser: Any, server: LiveDaphne, *, one_sample: bool, **context_args: Any) -> Any:
    context = browser.new_context(**context_args)
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(server.url + "/login/?next=/console/metrics/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    if one_sample:
        # What a dashboard opened right after the server started gets: a history of one sample.
        def first_sample_only(route: Any) -> None:
            response = route.fetch()
            data = response.json()
            data["samples"] = data["samples"][-1:]
            route.fulfill(response=response, body=json.dumps(data))

        page.route("**/console/metrics/data/", first_sample_only)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(r"/console/metrics/$"))
    page.wait_for_function("() => Number(document.getElementById('dashboard').dataset.samples) >= 1")
    page.wait_for_function("() => document.querySelector('[data-chart=process]').dataset.xMax")
    return page


# The history holds HISTORY samples, one a second while someone polls, but the server takes none while
# nobody does: a history gathered over a long test session spans more than HISTORY seconds. Still hours.
HOURS = 6 * 3600.0


def assert_spans_are_now(spans: list[dict[str, Any]], *, longest: float) -> None:
    assert [s["chart"] for s in spans] == list(CHARTS)
    for span in spans:
        # Today, ending at the newest sample (taken in the last few seconds by this machine's clock)...
        assert span["maxDay"] == span["today"], span
        assert abs(span["now"] - span["max"]) < 30, span
        # ...and a minute or more long, not years.
        assert 60 <= span["max"] - span["min"] <= longest, span


def test_first_load_axis_shows_the_last_minute(browser: Any, server: LiveDaphne) -> None:
    page = open_dashboard(browser, server, one_sample=True, viewport={"width": 1280, "height": 900})
    assert page.evaluate("document.getElementById('dashboard').dataset.samples") == "1"
    spans = page.evaluate(SPANS)
    assert_spans_are_now(spans, longest=60)
    assert all(s["max"] - s["min"] == pytest.approx(60) for s in spans)

    # The sample's time itself is Unix seconds (what uPlot's time scale reads), not milliseconds.
    t = page.evaluate("async () => (await (await fetch('/console/metrics/data/')).json()).samples.at(-1).t")
    assert abs(t - spans[0]["now"]) < 30
    page.context.close()


def test_axis_follows_the_history_as_it_grows(browser: Any, server: LiveDaphne) -> None:
    page = open_dashboard(browser, server, one_sample=False, viewport={"width": 1280, "height": 900})
    page.wait_for_function("() => Number(document.getElementById('dashboard').dataset.samples) >= 2")
    assert_spans_are_now(page.evaluate(SPANS), longest=HOURS)
    page.context.close()


def test_charts_shrink_to_a_phone(browser: Any, server: LiveDaphne) -> None:
    page = open_dashboard(browser, server, one_sample=False, viewport=PHONE, is_mobile=True, has_touch=True)
    assert page.evaluate("window.innerWidth") == PHONE["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    overflow = page.evaluate(
        """() => [...document.querySelectorAll("#dashboard .chart")].map((f) => {
             const figure = f.getBoundingClientRect();
             const plot = f.querySelector(".uplot").getBoundingClientRect();
             return { chart: f.dataset.chart, figureRight: figure.right, plotRight: plot.right };
           }).filter((c) => c.plotRight > c.figureRight || c.figureRight > 390)"""
    )
    assert overflow == []
    assert_spans_are_now(page.evaluate(SPANS), longest=HOURS)
    page.context.close()
