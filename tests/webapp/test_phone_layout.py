"""Every page of the site on a phone (390 x 844), in Debian's Chromium against a live Daphne (issue #17).

- No page scrolls sideways: wide tables scroll inside their own wrapper, charts shrink to the screen.
- The top bar is one row with every link (Documents too), and the chat composer shows its whole placeholder.
- The chat header cuts neither the title nor the model picker; attachment chips stay one scrolling row
  (issue #47).
- Flash messages float over the page (the layout does not move), and close with their button or Esc.

The pages are those of webapp/*/urls.py that render HTML: login, sign-up and first-run setup, the chat (start
page, a conversation, one full of wide content, its settings), account settings, documents, every console
page, the API docs, 403 and 404. Django's own /admin/ is in the list too. The 500 page has no URL to reach
it; pages that need an object made first (a group's page, a shared chat) are not visited.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE = {"width": 390, "height": 844}
ADMIN, ADMIN_PASSWORD = "phone-admin", "phone-admin-password-1"
READER, READER_PASSWORD = "phone-reader", "phone-reader-password-1"

# A chat whose content is wider than a phone: one unbroken word, a long code line, a wide table, a long title.
WIDE_WORD = "supercalifragilistic" * 12
WIDE_CODE = "```python\nprint('" + "wide " * 60 + "')\n```"
WIDE_TABLE = "\n".join(
    (
        "| " + " | ".join(f"column {i}" for i in range(12)) + " |",
        "|" + "---|" * 12,
        "| " + " | ".join(f"value {i}" for i in range(12)) + " |",
    )
)
WIDE_CHAT = {
    "title": "A very long title about lighthouses " * 4,
    "messages": [
        {"role": "user", "content": f"Look at this: {WIDE_WORD} and https://example.com/{WIDE_WORD}"},
        {
            "role": "assistant",
            "content": f"The code:\n\n{WIDE_CODE}\n\n{WIDE_TABLE}\n\nA long word: {WIDE_WORD}",
        },
    ],
}

# What each page is measured after: the point where its scripts have laid it out.
READY = {
    "chat": "#chat[data-connected=true]",
    "metrics": "#dashboard .uplot",
    "docs": ".swagger-ui .info",
}

# Elements that stick out past the screen's right edge, outside any scroll container: named in a failure.
CULPRITS = """(limit) => {
  const scrolls = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible") return true;
    }
    return false;
  };
  return [...document.querySelectorAll("body *")]
    .filter((el) => {
      const r = el.getBoundingClientRect();
      return r.width > 0 && r.right > limit + 0.5 && !scrolls(el);
    })
    .slice(0, 6)
    .map((el) => {
      const right = Math.round(el.getBoundingClientRect().right);
      return `${el.tagName.toLowerCase()}.${[...el.classList].join(".")} (right edge ${right} px)`;
    });
}"""


def manage_shell(server: LiveDaphne, code: str) -> str:
    return server.shell(code).strip()


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(ADMIN, ADMIN_PASSWORD, staff=True)
    daphne_server.create_user(READER, READER_PASSWORD)
    return daphne_server


@pytest.fixture(scope="module")
def site(server: LiveDaphne) -> dict[str, Any]:
    """Ids for the pages that need them, and what makes those pages full: keys, a request, a wide chat."""
    code = (
        "import json\n"
        "from django.contrib.auth.models import User\n"
        "from webapp.accounts.services import api_key_create\n"
        "from webapp.chat.transfer import import_chat\n"
        f"admin = User.objects.get(username={ADMIN!r})\n"
        f"reader = User.objects.get(username={READER!r})\n"
        "for name in ('laptop', 'a key with a rather long name for a phone screen'):\n"
        "    secret = api_key_create(user=admin, name=name, requests_per_minute=60).secret\n"
        f"chat = import_chat(user=reader, raw={json.dumps(WIDE_CHAT).encode()!r})\n"
        "ids = {'admin': admin.pk, 'reader': reader.pk, 'wide_chat': chat.pk, 'secret': secret}\n"
        "print(json.dumps(ids))\n"
    )
    ids: dict[str, Any] = json.loads(manage_shell(server, code).splitlines()[-1])
    # One request through the API (with a key, whether or not the server asks for one), so the requests
    # page has a row to lay out and the key some usage.
    body = json.dumps({"model": "default", "prompt": "Hello", "max_tokens": 2}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {ids.pop('secret')}"}
    request = urllib.request.Request(server.url + "/v1/completions", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200
    return ids


def log_in(browser: Any, server: LiveDaphne, username: str, password: str, next_path: str) -> Any:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(f"{server.url}/login/?next={next_path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(re.escape(next_path) + "$"))
    return page


@pytest.fixture(scope="module")
def admin_page(browser: Any, server: LiveDaphne, site: dict[str, Any]) -> Iterator[Any]:
    page = log_in(browser, server, ADMIN, ADMIN_PASSWORD, "/console/models/")
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def reader_page(browser: Any, server: LiveDaphne, site: dict[str, Any]) -> Iterator[Any]:
    # /console/ is the 403 page for a plain user: logging in straight onto it creates no draft chat, so
    # /chat/ shows the start page later.
    page = log_in(browser, server, READER, READER_PASSWORD, "/console/models/")
    yield page
    page.context.close()


@pytest.fixture(scope="module")
def fresh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """A server with no account yet (and no model: setup does not need one), for the first-run pages."""
    server = start_live_daphne(tmp_path_factory.mktemp("phone-setup"), autoload=False)
    yield server
    stop_live_daphne(server)


def assert_fits(page: Any, what: str) -> None:
    sizes = page.evaluate(
        "() => ({ inner: window.innerWidth, doc: document.documentElement.scrollWidth,"
        " body: document.body.scrollWidth })"
    )
    # A phone widens the layout to fit a page that overflows (or has no viewport meta), zooming it out:
    # innerWidth then grows with it, so it is checked against the screen too, not only against scrollWidth.
    culprits = page.evaluate(CULPRITS, PHONE["width"])
    assert sizes["inner"] == PHONE["width"], f"{what}: laid out {sizes['inner']} px wide; out: {culprits}"
    assert sizes["doc"] <= PHONE["width"], f"{what}: scrolls sideways ({sizes}); sticking out: {culprits}"
    assert sizes["body"] <= PHONE["width"], f"{what}: the body is wider ({sizes}); sticking out: {culprits}"


def visit(page: Any, url: str, ready: str | None = None) -> int:
    response = page.goto(url)
    page.wait_for_load_state("load")
    if ready:
        page.wait_for_selector(ready, state="attached")
    page.wait_for_timeout(200)  # a poll or a font swap can still move things
    return int(response.status) if response is not None else 0


ADMIN_PAGES = [
    ("chat conversation", "/chat/", "chat"),  # the admin's draft chat (index redirects to it)
    ("console overview", "/console/", None),
    ("console models", "/console/models/", None),
    ("console tuning", "/console/tuning/", None),
    ("console metrics", "/console/metrics/", "metrics"),
    ("console requests", "/console/requests/", None),
    ("console users", "/console/users/", None),
    ("console own user page with keys", "/console/users/{admin}/", None),
    ("console another user's page", "/console/users/{reader}/", None),
    ("console usage", "/console/usage/", None),
    ("console groups", "/console/groups/", None),
    ("console accounts", "/console/accounts/", None),
    ("console feedback", "/console/feedback/", None),
    ("console jobs", "/console/jobs/", None),
    ("console audit", "/console/audit/", None),
    ("console site", "/console/site/", None),
    ("account settings", "/settings/", None),
    ("documents", "/documents/", None),
    ("404 page", "/no-such-page/", None),
    ("django admin", "/admin/", None),
    ("API docs", "/v1/docs", "docs"),
]


@pytest.mark.parametrize(("what", "path", "ready"), ADMIN_PAGES)
def test_admin_pages_fit_a_phone(
    admin_page: Any, server: LiveDaphne, site: dict[str, Any], what: str, path: str, ready: str | None
) -> None:
    status = visit(admin_page, server.url + path.format(**site), READY.get(ready or ""))
    assert status in (200, 404), f"{what}: {status}"
    assert_fits(admin_page, what)


def test_chat_settings_panel_fits_a_phone(admin_page: Any, server: LiveDaphne) -> None:
    visit(admin_page, server.url + "/chat/", READY["chat"])
    admin_page.click("#settings-toggle")
    admin_page.wait_for_selector("#settings-panel", state="visible")
    assert_fits(admin_page, "chat settings")
    admin_page.click("#settings-toggle")


def test_reader_pages_fit_a_phone(reader_page: Any, server: LiveDaphne, site: dict[str, Any]) -> None:
    # The login redirect landed on the console: the 403 page.
    assert reader_page.locator("#error-title").inner_text() == "You can\u2019t open this page"
    assert_fits(reader_page, "403 page")

    visit(reader_page, f"{server.url}/chat/{site['wide_chat']}/", READY["chat"])
    assert reader_page.locator(".code-block").count() == 1
    assert_fits(reader_page, "a chat full of wide content")
    reader_page.click("#sidebar-toggle")
    reader_page.wait_for_selector("#chat-sidebar", state="visible")
    assert_fits(reader_page, "the chat list open")

    # The start page moves on by itself (start.js posts "new chat"): held here to measure it.
    reader_page.route("**/static/chat/start.js", lambda route: route.abort())
    visit(reader_page, server.url + "/chat/", "#start-chat")
    assert_fits(reader_page, "chat start page")
    reader_page.unroute("**/static/chat/start.js")


def test_login_and_setup_pages_fit_a_phone(
    browser: Any, server: LiveDaphne, fresh_server: LiveDaphne
) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    visit(page, server.url + "/login/")
    assert_fits(page, "login page")
    visit(page, server.url + "/signup/")  # the form, or the page saying sign-up is closed
    assert_fits(page, "sign-up page")
    visit(page, fresh_server.url + "/setup/", "form")
    assert page.locator("input[name=password1]").count() == 1
    assert_fits(page, "first-run setup")
    # From behind a proxy, setup asks for the token from the log first.
    page.set_extra_http_headers({"X-Forwarded-For": "203.0.113.9"})
    assert visit(page, fresh_server.url + "/setup/") == 403
    assert_fits(page, "first-run setup token page")
    context.close()


# ---- the top bar and the composer -----------------------------------------------------------------------


def test_top_bar_is_one_row_on_a_phone(admin_page: Any, server: LiveDaphne) -> None:
    visit(admin_page, server.url + "/chat/", READY["chat"])
    rows = admin_page.evaluate(
        """() => [...document.querySelector(".topbar").children].map((el) => {
             const r = el.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, right: r.right };
           })"""
    )
    header = admin_page.locator(".topbar").bounding_box()
    assert header is not None
    # One row: every part (brand, nav, theme/user/log out) overlaps the first part's height band.
    first = rows[0]
    assert all(part["top"] < first["bottom"] and part["bottom"] > first["top"] for part in rows), rows
    assert header["height"] <= 56, header
    assert all(part["right"] <= PHONE["width"] for part in rows), rows
    # The logo still names the home link for screen readers, and every control stays on screen.
    assert admin_page.get_by_role("link", name="Mooncake").is_visible()
    # Documents too (issue #47: it was hidden on phones to keep the row); Settings is a gear, still so named.
    for name in ("Chat", "Documents", "Console", "API"):
        assert admin_page.locator(".nav").get_by_role("link", name=name).is_visible()
    assert admin_page.locator(".topbar").get_by_role("link", name="Settings").is_visible()
    assert admin_page.get_by_role("button", name="Log out").is_visible()


# The selected model's whole name (measured in the select's own font) against the room the select gives it.
PICKER_FITS = """() => {
  const select = document.getElementById("model-select");
  const style = getComputedStyle(select);
  const context = document.createElement("canvas").getContext("2d");
  context.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const text = select.options[select.selectedIndex].text;
  const arrow = 20;  // Chromium's drop-down arrow
  const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
  const needed = Math.ceil(context.measureText(text).width + padding + arrow);
  return { text, needed, width: select.clientWidth, right: select.getBoundingClientRect().right };
}"""


def test_chat_header_cuts_neither_title_nor_model_picker(admin_page: Any, server: LiveDaphne) -> None:
    visit(admin_page, server.url + "/chat/", READY["chat"])
    title = admin_page.locator("#title-input").bounding_box()
    assert title is not None and title["width"] >= 0.7 * PHONE["width"], title  # was 78 px of 390
    picker = admin_page.evaluate(PICKER_FITS)
    assert picker["needed"] <= picker["width"] and picker["right"] <= PHONE["width"], picker
    header = admin_page.locator(".chat-header").bounding_box()
    assert header is not None and header["height"] <= 100, header  # two rows at most
    assert admin_page.locator("#settings-toggle").is_visible()
    assert_fits(admin_page, "chat header")


CHIP_ROWS = """() => {
  const chips = [...document.querySelectorAll("#doc-chips .doc-chip")];
  const box = document.getElementById("doc-chips");
  const tops = new Set(chips.map((c) => Math.round(c.getBoundingClientRect().top)));
  return { count: chips.length, rows: tops.size, scrolls: box.scrollWidth > box.clientWidth,
           overflowX: getComputedStyle(box).overflowX };
}"""


def test_attachment_chips_stay_one_scrolling_row(browser: Any, server: LiveDaphne) -> None:
    page = log_in(browser, server, READER, READER_PASSWORD, "/settings/")
    page.goto(server.url + "/chat/")  # the start page moves on to a new chat by itself (start.js)
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    page.wait_for_selector("#doc-tray .doc-manage")
    names = [f"quarterly-report-{i}-with-a-long-name.txt" for i in range(3)]
    page.set_input_files(
        "#doc-file", files=[{"name": n, "mimeType": "text/plain", "buffer": b"Lighthouses."} for n in names]
    )
    page.wait_for_function("() => document.querySelectorAll('#doc-chips .doc-chip').length === 3")
    chips = page.evaluate(CHIP_ROWS)
    assert chips == {"count": 3, "rows": 1, "scrolls": True, "overflowX": "auto"}
    assert_fits(page, "a chat with three attachments")
    # The last chip is reached by scrolling the row, not the page (read in one go: htmx replaces a chip
    # each second while its document is read).
    scrolled, right = page.evaluate(
        """() => { const box = document.getElementById("doc-chips"); box.scrollLeft = box.scrollWidth;
                   return [box.scrollLeft > 0, box.lastElementChild.getBoundingClientRect().right]; }"""
    )
    assert scrolled and right <= PHONE["width"] + 0.5
    page.context.close()


COMPOSER_HEIGHTS = (
    "() => { const t = document.getElementById('composer-input'); return [t.scrollHeight, t.clientHeight]; }"
)


def test_composer_shows_its_whole_placeholder(admin_page: Any, server: LiveDaphne) -> None:
    visit(admin_page, server.url + "/chat/", READY["chat"])
    composer = admin_page.locator("#composer-input")
    assert composer.input_value() == "" and composer.get_attribute("placeholder")
    # Chromium counts the placeholder in an empty textarea's scrollHeight: more than its height = clipped.
    scroll, client = admin_page.evaluate(COMPOSER_HEIGHTS)
    assert scroll <= client, f"placeholder needs {scroll} px, the box shows {client} px"
    # Typing gives the height back to the autosize; clearing shows the whole hint again.
    composer.fill("Hello")
    composer.fill("")
    scroll, client = admin_page.evaluate(COMPOSER_HEIGHTS)
    assert scroll <= client + 2, f"placeholder needs {scroll} px, the box shows {client} px"
    box = composer.bounding_box()
    assert box is not None and box["y"] + box["height"] <= PHONE["height"]


# ---- flash messages ------------------------------------------------------------------------------------


def save_limits(page: Any) -> None:
    page.click("#user-limits [type=submit]")
    page.wait_for_selector("#toasts .message")


def test_flash_messages_float_and_close(admin_page: Any, server: LiveDaphne, site: dict[str, Any]) -> None:
    page = admin_page
    visit(page, f"{server.url}/console/users/{site['admin']}/")
    assert page.locator("#toasts").count() == 0
    main_top = page.locator("#main").bounding_box()["y"]

    save_limits(page)
    toast = page.locator("#toasts .message")
    assert toast.count() == 1 and "Limits saved." in toast.inner_text()
    assert page.locator("#toasts").get_attribute("role") == "status"
    # Over the page, not in its flow: the main content starts where it did without a message.
    assert page.locator("#main").bounding_box()["y"] == main_top
    assert page.evaluate("getComputedStyle(document.getElementById('toasts')).position") == "fixed"
    box = toast.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    assert_fits(page, "a page with a flash message")

    # Keyboard: Tab reaches the close button; Enter closes the message and focus stays on the page.
    close = page.get_by_role("button", name="Dismiss: Limits saved.")
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('message-close')"):
            break
    else:
        pytest.fail("Tab never reached the message's close button")
    page.keyboard.press("Enter")
    assert close.count() == 0 and page.locator("#toasts").count() == 0
    assert page.evaluate("document.activeElement.id") == "main"
    assert page.locator("#main").bounding_box()["y"] == main_top

    # Esc closes it too.
    save_limits(page)
    page.keyboard.press("Escape")
    page.wait_for_selector("#toasts", state="detached")

    # And a click (a tap) on the ✕.
    save_limits(page)
    page.locator("#toasts .message-close").tap()
    page.wait_for_selector("#toasts", state="detached")
