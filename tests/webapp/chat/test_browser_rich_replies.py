"""Rich replies in a real browser: a Mermaid fence drawn as an SVG diagram, LaTeX as MathML, and links
that open in a new tab. The replies are written into the live server's database (the model cannot be
relied on to produce them), then the chat page is loaded as a user would open it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.chat.test_browser import log_in as shared_log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER, PASSWORD = "rich-replies", "rich-replies-password-1"

REPLY = """Euler: $e^{i\\pi} + 1 = 0$, prices $5 and $10 stay text.

```mermaid
graph TD
  A[Start] --> B{Ok?}
  B -->|yes| C[Done]
```

See [the version](%(url)s/version).
"""


@pytest.fixture(scope="module")
def server(daphne_server: LiveDaphne) -> LiveDaphne:
    daphne_server.create_user(USER, PASSWORD)
    return daphne_server


def seed_reply(server: LiveDaphne, content: str) -> int:
    """A finished exchange in a new chat of USER's, written straight into the server's database."""
    code = (
        "from django.contrib.auth.models import User\n"
        "from webapp.chat.models import Conversation, Message\n"
        f"c = Conversation.objects.create(user=User.objects.get(username={USER!r}), title='Rich')\n"
        "Message.objects.create(conversation=c, role='user', content='Show me')\n"
        f"Message.objects.create(conversation=c, role='assistant', content={json.dumps(content)}, "
        "status='complete', model='seeded')\n"
        "print(c.pk)\n"
    )
    return int(server.shell(code).strip().splitlines()[-1])


def test_diagram_math_and_links(browser: Any, server: LiveDaphne) -> None:
    page = shared_log_in(
        browser, server, username=USER, password=PASSWORD, viewport={"width": 1280, "height": 900}
    )
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    chat_id = seed_reply(server, REPLY % {"url": server.url})
    page.goto(f"{server.url}/chat/{chat_id}/")
    reply = page.locator("#messages .msg-assistant").last

    # Math: MathML from the server, the prices left alone.
    formula = reply.locator("math")
    assert formula.count() == 1
    assert formula.first.locator("mi").first.text_content() == "e"
    assert "prices $5 and $10 stay text" in (reply.text_content() or "")

    # The diagram: drawn from the vendored build, the source kept (hidden) for Copy.
    block = reply.locator(".code-block.mermaid")
    page.wait_for_selector("#messages .code-block.mermaid[data-diagram=drawn]", timeout=30_000)
    svg = block.locator(".mermaid-diagram svg")
    assert svg.count() == 1
    assert "Start" in (svg.text_content() or "") and "Done" in (svg.text_content() or "")
    assert block.locator("pre").is_hidden()
    box = svg.bounding_box()
    assert box is not None and box["width"] > 50 and box["height"] > 50
    # mermaid's own stylesheet took effect without 'unsafe-inline' (a constructed sheet): nodes are
    # filled with the theme's colour, not the SVG default black.
    fill = page.evaluate(
        "() => getComputedStyle(document.querySelector('.mermaid-diagram .node rect, "
        ".mermaid-diagram .node polygon')).fill"
    )
    assert fill not in ("", "none", "rgb(0, 0, 0)"), fill
    assert page.evaluate("() => !!window.mermaid") is True

    # A link opens in a new tab and leaves the chat where it was.
    link = reply.locator("a", has_text="the version")
    assert link.get_attribute("target") == "_blank"
    assert set((link.get_attribute("rel") or "").split()) >= {"noopener", "noreferrer"}
    with page.context.expect_page() as opened:
        link.click()
    new_tab = opened.value
    new_tab.wait_for_load_state()
    assert new_tab.url.endswith("/version")
    assert re.search(rf"/chat/{chat_id}/$", page.url)
    new_tab.close()

    # mermaid's scratch measuring node sets inline styles, which the policy refuses (harmless: the drawn
    # SVG is styled through CSSOM); nothing may need a script allowance.
    assert not [v for v in violations if "script-src" in v], violations
    # A theme switch redraws the diagram in the other palette.
    page.click("#theme-toggle")
    page.wait_for_selector(
        "#messages .code-block.mermaid[data-diagram=drawn] .mermaid-diagram svg", timeout=30_000
    )
    assert block.locator(".mermaid-diagram svg").count() == 1
    page.context.close()


# What chat.js does with each streamed update: the reply's <article> replaced by the server's new HTML.
UPSERT = """([status, source]) => {
  const t = document.createElement("template");
  t.innerHTML = `<article class="msg msg-assistant status-${status}" id="msg-999999">
    <div class="msg-body markdown">
    <div class="code-block mermaid"><div class="code-head"><span>mermaid</span></div>
    <pre class="highlight"><code></code></pre></div></div></article>`;
  const node = t.content.firstElementChild;
  node.querySelector("code").textContent = source;
  const old = document.getElementById("msg-999999");
  if (old) { old.replaceWith(node); } else { document.getElementById("messages").appendChild(node); }
}"""


def test_diagram_is_drawn_when_the_reply_finishes(browser: Any, server: LiveDaphne) -> None:
    page = shared_log_in(browser, server, username=USER, password=PASSWORD)
    page.evaluate(UPSERT, ["streaming", "graph LR\n  X --> Y"])
    page.wait_for_timeout(1_000)
    streaming = page.locator("#msg-999999 .code-block.mermaid")
    assert streaming.get_attribute("data-diagram") is None  # never mid-stream
    page.evaluate(UPSERT, ["complete", "graph LR\n  X --> Y"])
    page.wait_for_selector("#msg-999999 .code-block.mermaid[data-diagram=drawn] svg", timeout=30_000)
    # Not mermaid at all: the source stays as a code block.
    page.evaluate(UPSERT, ["complete", "this is not a diagram ((("])
    page.wait_for_selector("#msg-999999 .code-block.mermaid[data-diagram=error]", timeout=30_000)
    assert page.locator("#msg-999999 pre").is_visible()
    assert page.locator("#msg-999999 svg").count() == 0
    page.context.close()


def test_mermaid_is_not_loaded_without_a_fence(browser: Any, server: LiveDaphne) -> None:
    page = shared_log_in(browser, server, username=USER, password=PASSWORD)
    chat_id = seed_reply(server, "Just $x^2$ and text.")
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    page.goto(f"{server.url}/chat/{chat_id}/")
    page.wait_for_selector("#chat[data-connected=true]")
    assert page.locator("#messages .msg-assistant math").count() == 1
    page.wait_for_timeout(500)
    assert any(u.endswith("/static/chat/diagrams.js") for u in requested)
    assert not any("mermaid" in u for u in requested)
    page.context.close()
