"""Fixtures shared by the web suites: one headless Debian Chromium per module, driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # `make test` installs chromium; a missing browser is a broken setup, so fail rather than skip.
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: apt-get install chromium chromium-driver (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


# The session's models-list server (tests/webapp/live_models.py), for the suites in this folder.
from tests.webapp.live_models import models_list_server  # noqa: E402, F401
