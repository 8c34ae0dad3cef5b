"""Incremental rendering of a streaming reply equals rendering the whole text, at every prefix."""

from __future__ import annotations

import random

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.chat.wsutil import is_idle, open_socket, receive_until
from webapp.chat import events, services
from webapp.chat.generation import chat_replies
from webapp.chat.markdown import render_markdown
from webapp.chat.markdown_stream import OPEN_CODE_HIGHLIGHT_CHARS, IncrementalMarkdown
from webapp.chat.models import Message

REALISTIC = """# Sorting in Python

Here is **how** to sort a list, with `sorted()` and a *key*:

```python
def by_length(words: list[str]) -> list[str]:
    # Shortest first.
    return sorted(words, key=len)


print(by_length(["pear", "fig", "banana"]))
```

Steps:

1. Call `sorted`.
2. Pass a key
   that spans lines.

3. Done — a loose item.

- tight one
- tight two
  - nested
* other bullet

| Name | Length |
|:-----|-------:|
| fig  | 3 |
| pear | 4 |
Trailing row text

> A quote that
continues lazily.
>
> - with a list

Setext heading
--------------

    indented code

    still code after a blank

Term~~struck~~ and a [link](https://example.com) and <b>raw</b> html.
***
Final line without newline"""

FRAGMENTS = [
    "# H\n",
    "## Sub heading\n",
    "text ",
    "more words ",
    "**bold** ",
    "_em_ ",
    "`code` ",
    "\n",
    "\n\n",
    "- item\n",
    "* star\n",
    "1. one\n",
    "2. two\n",
    "10) ten\n",
    "   indented\n",
    "    code\n",
    "```\n",
    "```js\n",
    "~~~\n",
    "let x = 1;\n",
    "> quote\n",
    ">\n",
    "| a | b |\n",
    "|---|---|\n",
    "| 1 | 2 |\n",
    "---\n",
    "===\n",
    "***\n",
    "[x](http://a.b) ",
    "<div>",
    "\\",
    "&amp; ",
    "\r\n",
    "\t",
    "- [ ] task\n",
    "  - nested\n",
    "2\n",
    ". b\n",
]


def _stream_matches(text: str, cuts: list[int]) -> None:
    renderer = IncrementalMarkdown()
    for cut in cuts:
        prefix = text[:cut]
        assert renderer.render(prefix) == render_markdown(prefix), repr(prefix)


def test_realistic_reply_at_every_prefix() -> None:
    _stream_matches(REALISTIC, list(range(len(REALISTIC) + 1)))


@pytest.mark.parametrize("seed", range(40))
def test_random_markdown_at_every_prefix(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(10, 60)))
    _stream_matches(text, list(range(len(text) + 1)))


@pytest.mark.parametrize("seed", range(10))
def test_random_steps(seed: int) -> None:
    rng = random.Random(1000 + seed)
    text = "".join(rng.choice(FRAGMENTS) for _ in range(200))
    cuts, at = [], 0
    while at < len(text):
        at = min(len(text), at + rng.randint(1, 40))
        cuts.append(at)
    _stream_matches(text, cuts)


@pytest.mark.parametrize(
    "text",
    [
        "See [the docs] here.\n\nMore text.\n\n[the docs]: https://example.com\n\nAfter.\n",
        "1. a\n\n2. b\n\n2. c\n",
        "- a\n\n- b\n\npara\n\n- c\n",
        "foo\n| a | b |\n|---|---|\n| 1 | 2 |\n\nbar\n",
    ],
)
def test_tricky_texts(text: str) -> None:
    _stream_matches(text, list(range(len(text) + 1)))


def test_replaced_text_starts_over() -> None:
    renderer = IncrementalMarkdown()
    renderer.render("# One\n\nfirst paragraph\n\nsecond")
    assert renderer.render("Other\n\ntext") == render_markdown("Other\n\ntext")


def test_finished_blocks_are_cached() -> None:
    renderer = IncrementalMarkdown()
    text = "".join(f"Paragraph {i} with **bold**.\n\n" for i in range(200))
    renderer.render(text)
    renderer.render(text + "tail")
    assert len(renderer._done_text) > len(text) - 40  # all but the last paragraph are done


def test_prerendered_body_gives_the_same_fragment() -> None:
    message = Message(role="assistant", status="streaming", content=REALISTIC, model="m")
    body = IncrementalMarkdown().render(REALISTIC)
    assert events.message_html(message, body) == events.message_html(message)


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
async def test_streaming_updates_use_the_incremental_renderer(
    monkeypatch: pytest.MonkeyPatch, fake_engine: FakeEngine
) -> None:
    calls: list[str] = []
    original = IncrementalMarkdown.render

    def counting(self: IncrementalMarkdown, text: str) -> str:
        calls.append(text)
        return original(self, text)

    monkeypatch.setattr(IncrementalMarkdown, "render", counting)
    fake_engine.delay = 0.02
    fake_engine.reply = " ".join(["word"] * 30)
    user = await sync_to_async(User.objects.create_user)("carol", password="pw")
    chat = await sync_to_async(services.conversation_create)(user=user)
    ws = await open_socket(user, chat.pk)
    assert (await ws.connect())[0]
    assert is_idle(await ws.receive_json_from())
    await ws.send_json_to({"type": "send", "content": "Go"})
    await receive_until(ws, is_idle)
    await chat_replies().wait_idle()
    assert calls and all(text.startswith("word") for text in calls)
    await ws.disconnect()


def test_a_long_open_code_block_streams_without_highlighting(monkeypatch: pytest.MonkeyPatch) -> None:
    from webapp.chat import markdown

    highlighted: list[str] = []
    highlight = markdown._highlight

    def counting(code: str, lang: str) -> str:
        highlighted.append(code)
        return highlight(code, lang)

    monkeypatch.setattr(markdown, "_highlight", counting)
    code = "".join(f"def f{i}(x):\n    return x < {i} and '<b>'\n" for i in range(120))
    head = "Here it is:\n\n```python\n"
    renderer = IncrementalMarkdown()
    step = 97
    for end in range(0, len(code), step):
        html = renderer.render(head + code[:end])
        if len(code[:end]) > OPEN_CODE_HIGHLIGHT_CHARS + step:
            assert "&lt;b&gt;" in html and "<b>" not in html  # escaped, never markup
    calls_while_open = len(highlighted)
    # Short prefixes were highlighted as usual; the long tail of updates cost no highlighting at all.
    assert calls_while_open <= (OPEN_CODE_HIGHLIGHT_CHARS + len(head)) // step + 2
    closed = head + code + "```\n"
    assert renderer.render(closed) == render_markdown(closed)
    assert len(highlighted) > calls_while_open
