"""Incremental Markdown for a streaming reply: finished blocks are rendered once, only the last is redone.

Re-rendering a whole reply on every update is quadratic in its length. CommonMark parses line by line and
a top-level block that has been followed by another (over complete lines) can no longer change, so its HTML
is final and rendering it alone gives the same HTML as rendering it in place. The exception is link
reference definitions, which are global: once one appears the renderer falls back to whole renders.
Display math (`$$` or `\\[` blocks, webapp/chat/math.py) runs to its closer or to the text's end, like a
fence, so an open one is always the last block and the rule holds for it too.
The result always equals render_markdown(text) (tests/webapp/chat/test_markdown_stream.py checks it),
with one exception: a code block still open (no closing fence yet) and longer than
OPEN_CODE_HIGHLIGHT_CHARS streams as escaped text, because highlighting it again on every update would
cost the event loop more the longer it gets; it is highlighted once it closes or the reply ends.
"""

from __future__ import annotations

from html import escape
from typing import Any

from webapp.chat.markdown import code_block_html, fence_language, parser, render_markdown, sanitize

OPEN_CODE_HIGHLIGHT_CHARS = 2_000


def _normalize(text: str) -> str:
    # The same newline and NUL rewriting markdown-it does first, so our line offsets match its line numbers.
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "\ufffd")


def _render_piece(text: str) -> tuple[str, bool]:
    """Sanitized HTML for a run of whole blocks, and whether it defines link references."""
    env: dict[str, Any] = {}
    html = sanitize(parser().render(text, env))
    return html, bool(env.get("references"))


def _last_block_start(text: str) -> int:
    """Character offset of the last top-level block of `text` (whole lines); 0 if there is only one."""
    md = parser()
    tokens: list[Any] = []
    md.block.parse(text, md, {}, tokens)  # block structure only: inline parsing cannot move block boundaries
    starts = [t.map[0] for t in tokens if t.level == 0 and t.nesting >= 0 and t.map is not None]
    if len(starts) < 2:
        return 0
    offset = 0
    for _ in range(starts[-1]):
        offset = text.index("\n", offset) + 1
    return offset


class IncrementalMarkdown:
    """Renders successive versions of one growing text; each call returns render_markdown(text)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._done_text = ""  # normalized source of the finished blocks
        self._done_html = ""
        self._scanned = 0  # length of the normalized text whose whole lines were last scanned for blocks
        self._whole = False  # link references seen: render everything every time

    def render(self, text: str) -> str:
        text = _normalize(text)
        if not text.startswith(self._done_text):  # Not a continuation (e.g. content replaced): start over.
            self._reset()
        if self._whole:
            return render_markdown(text)
        self._advance(text)
        tail = text[len(self._done_text) :]
        open_code = _long_open_fence(tail)
        if open_code is not None:
            return self._done_html + open_code
        tail_html, has_refs = _render_piece(tail)
        if has_refs or self._whole:
            self._whole = True
            return render_markdown(text)
        return self._done_html + tail_html

    def _advance(self, text: str) -> None:
        """Move finished blocks out of the tail, judged on complete lines (a partial one may still change)."""
        complete = text.rfind("\n") + 1
        if complete <= self._scanned or complete <= len(self._done_text):
            return
        self._scanned = complete
        pending = text[len(self._done_text) : complete]
        cut = _last_block_start(pending)
        if cut == 0:
            return
        html, has_refs = _render_piece(pending[:cut])
        if has_refs:
            self._whole = True
            return
        self._done_text += pending[:cut]
        self._done_html += html


def _long_open_fence(tail: str) -> str | None:
    """The escaped HTML of `tail` when it is one fenced code block, still open and long; else None."""
    if len(tail) <= OPEN_CODE_HIGHLIGHT_CHARS or not tail.lstrip(" ").startswith(("```", "~~~")):
        return None
    md = parser()
    tokens: list[Any] = []
    md.block.parse(tail, md, {}, tokens)
    if len(tokens) != 1 or tokens[0].type != "fence" or _fence_closed(tail, tokens[0].markup):
        return None
    fence = tokens[0]
    return code_block_html(escape(fence.content), fence_language(fence.info))


def _fence_closed(tail: str, markup: str) -> bool:
    """Whether a line after the opening one closes the fence (CommonMark: the same character, at least
    as long, up to three spaces of indent, nothing after but spaces)."""
    lines = tail.split("\n")[1:]
    return any(
        line.strip(" ").startswith(markup)
        and len(line) - len(line.lstrip(" ")) <= 3
        and not line.strip(" ").lstrip(markup[0]).strip()
        for line in lines
    )
