"""LaTeX in replies ($…$, $$…$$, \\(…\\), \\[…\\]) as MathML, rendered on the server with latex2mathml.

A markdown-it plugin: inline rules run before `escape` (so `\\(` is not eaten as an escaped bracket) and
after code spans have their own chance at earlier positions, so math never starts inside `code`.
Prices stay text: an opening `$` must not be followed by a space, a closing one must not follow a space
nor be followed by a digit ("$5 and $10" has no valid closer).

A display block opened by a line starting `$$` or `\\[` runs to its closing delimiter or, like an
unclosed code fence, to the end of the text. That keeps markdown_stream's rule true (a block followed
by another never changes), and a half-streamed block shows its source as code until it closes.

The MathML goes through the same nh3 allow-list as everything else: MATHML_TAGS and MATHML_ATTRIBUTES
are what latex2mathml emits, minus `href` (\\href) and `style` (\\style), which are dropped.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left
from collections.abc import Sequence
from html import escape

from latex2mathml.converter import convert
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererProtocol
from markdown_it.rules_block import StateBlock
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

logger = logging.getLogger(__name__)

MATHML_TAGS = frozenset(
    {
        "math", "mrow", "mi", "mn", "mo", "mtext", "mspace", "mfrac", "msqrt", "mroot", "msub", "msup",
        "msubsup", "munder", "mover", "munderover", "mtable", "mtr", "mtd", "mstyle", "menclose",
        "mpadded", "mphantom",
    }
)  # fmt: skip
# Presentation attributes only: none of them loads anything or runs anything.
_MATHML_ATTRS = frozenset(
    {
        "accent", "columnalign", "columnlines", "columnspacing", "depth", "displaystyle", "fence", "form",
        "height", "largeop", "linebreak", "linethickness", "lspace", "mathbackground", "mathcolor",
        "mathsize", "mathvariant", "maxsize", "minsize", "movablelimits", "notation", "rowlines",
        "rowspacing", "rspace", "scriptlevel", "separator", "stretchy", "voffset", "width",
    }
)  # fmt: skip
MATHML_ATTRIBUTES: dict[str, set[str]] = {tag: set(_MATHML_ATTRS) for tag in MATHML_TAGS}
MATHML_ATTRIBUTES["math"] = {"display"}

# A `$` that can close inline math: after a non-space character, not before a digit ("$5 and $10").
_DOLLAR_CLOSER = re.compile(r"(?<=\S)\$(?!\d)")
MAX_MATH_CHARS = 4_000  # a runaway "formula" is shown as code rather than converted


def to_mathml(latex: str, *, display: bool, block: bool) -> str:
    """MathML for `latex`; its source as code when latex2mathml rejects it (never an exception).

    `display`: centred on its own line; `block`: a block of its own (a `$$` inside a paragraph is
    display math but must stay phrasing content, or the HTML parser would split the paragraph)."""
    source = latex.strip()
    try:
        if len(source) > MAX_MATH_CHARS:
            raise ValueError("formula too long")
        html = convert(source, display="block" if display else "inline")
    except Exception as exc:  # latex2mathml raises many types (its own, IndexError, KeyError...)
        logger.debug("LaTeX not converted (%s): %r", type(exc).__name__, source[:200])
        return _as_code(latex, block=block)
    return f'<div class="math-display">{html}</div>\n' if block else html


def _as_code(latex: str, *, block: bool) -> str:
    if block:
        return f'<pre class="math-source"><code>{escape(latex)}</code></pre>\n'
    return f'<code class="math-source">{escape(latex)}</code>'


# ---- inline


def _escaped(src: str, pos: int) -> bool:
    """Whether src[pos] is preceded by an odd number of backslashes."""
    count = 0
    while pos > 0 and src[pos - 1] == "\\":
        count += 1
        pos -= 1
    return count % 2 == 1


def _positions(state: StateInline, key: str) -> list[int]:
    """Sorted offsets in this inline text where `key` ("$" closers, "$$", "\\)", "\\]") could close math.

    Found once per text and kept in the render's env, so a paragraph full of prices or unmatched openers
    costs a bisect per opener rather than a scan to its end (quadratic, on every streamed update)."""
    cache: dict[tuple[str, str], list[int]] = state.env.setdefault("math_closers", {})
    found = cache.get((key, state.src))
    if found is None:
        src = state.src
        if key == "$":
            found = [m.start() for m in _DOLLAR_CLOSER.finditer(src) if not _escaped(src, m.start())]
        else:
            found = [m.start() for m in re.finditer(f"(?={re.escape(key)})", src)]  # overlapping too
        cache[(key, state.src)] = found
    return found


def _next(state: StateInline, key: str, start: int, end: int) -> int:
    """The first closer `key` at or after `start` and before `end`; -1 if none."""
    found = _positions(state, key)
    i = bisect_left(found, start)
    return found[i] if i < len(found) and found[i] + len(key) <= end else -1


def _push(state: StateInline, content: str, display: bool, markup: str) -> None:
    token = state.push("math_inline_display" if display else "math_inline", "math", 0)
    token.content = content
    token.markup = markup


def _inline_math(state: StateInline, silent: bool) -> bool:
    src, pos, end = state.src, state.pos, state.posMax
    if src[pos] == "\\" and pos + 1 < end and src[pos + 1] in "([":
        opener = src[pos + 1]
        closer = "\\)" if opener == "(" else "\\]"
        close = _next(state, closer, pos + 2, end)
        if close < 0 or not src[pos + 2 : close].strip():
            return False
        if not silent:
            _push(state, src[pos + 2 : close], opener == "[", "\\" + opener)
        state.pos = close + 2
        return True
    if src[pos] != "$":
        return False
    if src.startswith("$$", pos):
        close = _next(state, "$$", pos + 2, end)
        if close < 0 or not src[pos + 2 : close].strip():
            return False
        if not silent:
            _push(state, src[pos + 2 : close], True, "$$")
        state.pos = close + 2
        return True
    if pos + 1 >= end or src[pos + 1].isspace():
        return False
    close = _next(state, "$", pos + 2, end)  # pos + 1 is the content's first character
    if close < 0:
        return False
    if not silent:
        _push(state, src[pos + 1 : close], False, "$")
    state.pos = close + 1
    return True


# ---- block

_BLOCK_DELIMS = (("$$", "$$"), ("\\[", "\\]"))


def _block_math(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    if state.is_code_block(start_line):
        return False
    first = state.src[state.bMarks[start_line] + state.tShift[start_line] : state.eMarks[start_line]]
    delims = next(((o, c) for o, c in _BLOCK_DELIMS if first.startswith(o)), None)
    if delims is None:
        return False
    opener, closer = delims
    rest = first[len(opener) :]
    if opener == "$$" and rest.startswith("$"):  # "$$$": not ours
        return False
    lines: list[str] = []
    closed = False
    line = start_line
    if closer in rest:  # one line: "$$ x $$"; only when nothing follows the closer
        body, _, after = rest.partition(closer)
        if after.strip() or not body.strip():
            return False
        lines.append(body)
        closed = True
    else:
        lines.append(rest)
        while not closed:
            line += 1
            if line >= end_line:
                break
            text = state.src[state.bMarks[line] + state.tShift[line] : state.eMarks[line]]
            if closer in text:
                body, _, after = text.partition(closer)
                lines.append(body)
                closed = True
                # Text after the closer belongs to the block; it is dropped, as a fence drops its tail.
            else:
                lines.append(text)
    if silent:
        return True
    state.line = line + 1
    token = state.push("math_block" if closed else "math_block_open_end", "math", 0)
    token.block = True
    token.content = "\n".join(lines)
    token.markup = opener
    token.map = [start_line, state.line]
    return True


# ---- render


def _render_inline(
    self: RendererProtocol, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    return to_mathml(tokens[idx].content, display=tokens[idx].type == "math_inline_display", block=False)


def _render_block(
    self: RendererProtocol, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    return to_mathml(tokens[idx].content, display=True, block=True)


def _render_unclosed(
    self: RendererProtocol, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    """A display block without its closer (still streaming, or never closed): its source, as code."""
    token = tokens[idx]
    return _as_code(token.markup + token.content, block=True)


def math_plugin(md: MarkdownIt) -> None:
    md.inline.ruler.before("escape", "math_inline", _inline_math)
    # Like a fence: it may interrupt a paragraph ("where:\n$$...") and a list item.
    md.block.ruler.before(
        "fence", "math_block", _block_math, {"alt": ["paragraph", "reference", "blockquote", "list"]}
    )
    md.add_render_rule("math_inline", _render_inline)
    md.add_render_rule("math_inline_display", _render_inline)
    md.add_render_rule("math_block", _render_block)
    md.add_render_rule("math_block_open_end", _render_unclosed)
