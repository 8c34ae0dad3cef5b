"""Documents in a real browser against a live Daphne, the real model and a real Celery worker: upload by the
button and by drag-and-drop, watch the chips reach "ready", ask, and read the reply's sources."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in, send, set_max_tokens, wait_idle
from tests.webapp.documents.files import make_pdf
from tests.webapp.documents.workers import celery_worker

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.worker]

USER, PASSWORD = "docs-e2e", "docs-e2e-password-1"
PAGES = [
    "Mooncake Bakery handbook. Opening hours are nine to five.",
    "The secret ingredient of the house mooncake is cardamom from Kerala.",
]
# A file dropped on the chat pane, as the browser builds it from a drag out of the file manager.
DROP = """([name, text]) => {
  const data = new DataTransfer();
  data.items.add(new File([text], name, {type: "text/plain"}));
  const pane = document.querySelector(".chat-pane");
  for (const type of ["dragenter", "dragover", "drop"]) {
    pane.dispatchEvent(new DragEvent(type, {dataTransfer: data, bubbles: true, cancelable: true}));
  }
}"""


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> Iterator[LiveDaphne]:
    daphne_server.create_user(USER, PASSWORD)
    with celery_worker(daphne_server.env, daphne_server.data_dir / "documents-worker.log"):
        yield daphne_server


def test_documents_in_a_chat(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, username=USER, password=PASSWORD, viewport={"width": 1280, "height": 900})
    set_max_tokens(page, 24)
    page.wait_for_selector("#doc-tray .doc-manage")
    page.set_input_files(
        "#doc-file",
        files=[{"name": "handbook.pdf", "mimeType": "application/pdf", "buffer": make_pdf(PAGES)}],
    )
    page.evaluate(DROP, ["notes.txt", "Deliveries arrive on Tuesdays."])
    pdf_chip = page.locator("#doc-chips .doc-chip", has_text="handbook.pdf")
    text_chip = page.locator("#doc-chips .doc-chip", has_text="notes.txt")
    pdf_chip.locator("text=Ready · 2 pages").wait_for(timeout=120_000)
    text_chip.locator("text=Ready").wait_for(timeout=120_000)
    # A file the server cannot take is answered on its own chip.
    page.set_input_files(
        "#doc-file", files=[{"name": "x.png", "mimeType": "image/png", "buffer": b"\x89PNG"}]
    )
    error = page.locator(".doc-upload-error", has_text="not supported")
    error.wait_for()
    error.locator(".doc-dismiss").click()
    assert error.count() == 0

    send(page, "What is the secret ingredient?")
    wait_idle(page)
    reply = page.locator("#messages .msg-assistant").last
    sources = reply.locator(".doc-citations")
    sources.locator("summary").first.click()
    first = sources.locator(".doc-citation").first
    assert re.search(r"handbook\.pdf, page 2", first.inner_text())
    quote = first.locator(".doc-quote-text")
    assert not quote.is_visible()
    first.locator(".doc-quote > summary").click()
    assert quote.is_visible() and "cardamom" in quote.inner_text()

    # After a reload the sources come from the database, and the chips are still there.
    page.reload()
    page.wait_for_selector("#chat[data-connected=true]")
    assert (
        "handbook.pdf"
        in page.locator("#messages .msg-assistant").last.locator(".doc-citations").text_content()
    )
    page.locator("#doc-chips .doc-chip", has_text="notes.txt").wait_for()
    # Removing an upload takes it off the chat.
    page.locator("#doc-chips .doc-chip", has_text="notes.txt").locator(".doc-remove").click()
    page.locator("#doc-chips .doc-chip", has_text="notes.txt").wait_for(state="detached")


def test_a_collection_attached_to_a_chat(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, username=USER, password=PASSWORD, viewport={"width": 1280, "height": 900})
    chat_url = page.url
    page.goto(server.url + "/documents/")
    page.fill("#new-collection", "Bakery")
    page.click(".docs-new [type=submit]")
    section = page.locator(".docs-collection", has_text="Bakery")
    section.locator("input[type=file]").set_input_files(
        files=[{"name": "recipes.md", "mimeType": "text/markdown", "buffer": b"# Buns\nBake at 200 degrees."}]
    )
    section.locator(".docs-upload [type=submit]").click()
    page.locator(".toasts", has_text="Uploaded recipes.md to Bakery").wait_for()
    chip = page.locator(".docs-collection .doc-chip", has_text="recipes.md")
    chip.locator("text=Ready").wait_for(timeout=120_000)  # polled in place until the worker is done

    page.goto(chat_url)
    page.wait_for_selector("#chat[data-connected=true]")
    page.select_option(".doc-attach-form select", label="Bakery (1)")
    page.click(".doc-attach-form [type=submit]")
    page.locator("#doc-chips .doc-attached", has_text="Bakery").wait_for()
    set_max_tokens(page, 8)
    send(page, "At what temperature are buns baked?")
    wait_idle(page)
    sources = page.locator("#messages .msg-assistant").last.locator(".doc-citations")
    assert "recipes.md" in (sources.text_content() or "") and "Buns" in (sources.text_content() or "")
    # Detaching takes the collection off this chat only.
    page.locator("#doc-chips .doc-attached", has_text="Bakery").locator(".doc-remove").click()
    page.locator("#doc-chips .doc-attached").wait_for(state="detached")
    page.goto(server.url + "/documents/")
    assert page.locator(".docs-collection .doc-chip", has_text="recipes.md").count() == 1
