"""Adding models from the console in a real browser (Debian's Chromium) against a live Daphne: a GGUF uploaded
in chunks with a progress bar (stopped, then resumed after a reload), registered, then loaded with its load
steps shown; and a file copied into the models folder, registered with one click from the list of files.
No console errors and no Content-Security-Policy violations on the way."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inference.models.loader.source import default_gguf_path
from tests.live_server import LiveDaphne
from tests.webapp.console.test_browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "models-e2e", "models-e2e-password-1"
LISTEN = """window.__csp = [];
document.addEventListener("securitypolicyviolation", e => window.__csp.push(e.violatedDirective));"""
PROGRESS_MID_WAY = """() => { const bar = document.getElementById('model-upload-progress');
  return bar.value > 0 && bar.value < bar.max; }"""


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD, staff=True)
    return daphne_server


@pytest.fixture
def errors() -> list[str]:
    """The page's console errors; a test that provokes one on purpose takes it off."""
    return []


@pytest.fixture
def page(browser: Any, server: LiveDaphne, errors: list[str]) -> Iterator[Any]:
    """A signed-in admin on the models page; fails the test on any console error or CSP violation."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    context.add_init_script(LISTEN)
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.url + "/login/?next=/console/models/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(r"/console/models/$"))
    yield page
    assert page.evaluate("() => window.__csp") == []
    assert errors == []
    context.close()


def test_upload_resume_register_and_load_with_progress(page: Any, server: LiveDaphne, tmp_path: Path) -> None:
    assert (server.data_dir / "models").is_dir()  # made at start on this fresh data folder
    upload = tmp_path / "Smol Upload.gguf"
    shutil.copyfile(default_gguf_path(), upload)
    offsets: list[int] = []
    page.on(
        "request",
        lambda r: offsets.append(int(r.url.rsplit("offset=", 1)[1])) if r.method == "PUT" else None,
    )

    # Started, seen moving, stopped part-way.
    page.set_input_files("#model-upload-file", str(upload))
    page.click("#model-upload-button")
    page.wait_for_function(PROGRESS_MID_WAY, polling=10)
    page.click("#model-upload-cancel")
    page.wait_for_selector("#model-upload[data-state=stopped]")
    shot(page, "console-models-upload-stopped.png")
    kept = int(page.get_attribute("#model-upload", "data-uploaded"))
    assert 0 < kept < upload.stat().st_size

    # A reload, the same file again: it goes on from what the server has, then registers the model.
    page.reload()
    offsets.clear()
    page.set_input_files("#model-upload-file", str(upload))
    page.click("#model-upload-button")
    page.wait_for_selector("tr[data-model='Smol-Upload']", timeout=120_000)
    assert offsets and offsets[0] >= kept
    assert "Uploaded Smol-Upload.gguf and registered it as Smol-Upload" in page.inner_text("#toasts")
    assert (server.data_dir / "models" / "Smol-Upload.gguf").stat().st_size == upload.stat().st_size

    # Loaded, its steps shown while it loads, then unloaded again to leave the server as it was.
    row = page.locator("tr[data-model='Smol-Upload']")
    row.get_by_role("button", name="Load").click()
    page.wait_for_selector("tr[data-model='Smol-Upload'] .load-progress .load-phase", timeout=60_000)
    shot(page, "console-models-loading.png")
    page.wait_for_selector("tr[data-model='Smol-Upload'][data-state=loaded]", timeout=180_000)
    page.wait_for_selector("#models-live[data-busy=false]", timeout=30_000)
    assert page.locator("tr[data-model='Smol-Upload'] .load-progress").count() == 0
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr[data-model='Smol-Upload']").get_by_role("button", name="Unload").click()
    page.wait_for_selector("tr[data-model='Smol-Upload'][data-state=available]", timeout=60_000)


def test_a_bad_file_is_refused_inline(page: Any, tmp_path: Path, errors: list[str]) -> None:
    fake = tmp_path / "notes.gguf"
    fake.write_text("plain text, not a model\n" * 100, encoding="utf-8")
    page.set_input_files("#model-upload-file", str(fake))
    page.click("#model-upload-button")
    page.wait_for_selector("#model-upload[data-state=failed]")
    assert "notes.gguf is not a GGUF file" in page.inner_text("#model-upload-error")
    # The refusal is a 400, which Chromium logs for any fetch; it is the one error this test expects.
    assert errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]
    errors.clear()


def test_register_from_the_list_of_model_files(page: Any, server: LiveDaphne) -> None:
    shutil.copyfile(default_gguf_path(), server.data_dir / "models" / "folder-copy.gguf")
    page.reload()
    listed = page.locator("tr.model-file", has_text="folder-copy.gguf")
    shot(page, "console-models-files.png")
    assert listed.locator("code").inner_text() == "folder-copy"
    listed.get_by_role("button", name="Register").click()
    page.wait_for_selector("tr[data-model='folder-copy']")
    assert "Registered folder-copy" in page.inner_text("#toasts")
    assert page.locator("tr.model-file", has_text="folder-copy.gguf").count() == 0
