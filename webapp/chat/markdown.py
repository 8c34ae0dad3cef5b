"""Server-side Markdown for model output: markdown-it-py, Pygments highlighting, then nh3 sanitizing."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from html import escape

import nh3
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererProtocol
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from webapp.chat.math import MATHML_ATTRIBUTES, MATHML_TAGS, math_plugin

_FORMATTER = HtmlFormatter(nowrap=True)

_ALLOWED_TAGS = {
    "a",
    "blockquote",
    "br",
    "button",
    "code",
    "del",
    "div",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "li",
    "ol",
    "p",
    "pre",
    "s",
    "span",
    "strong",
    "table",
    "tbody",
    "td",
    "th",
    "thead",
    "tr",
    "ul",
    *MATHML_TAGS,
}
_ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "button": {"class", "type", "aria-label"},
    "code": {"class"},
    "div": {"class"},
    "ol": {"start"},
    "pre": {"class"},
    "span": {"class"},
    "td": {"style"},
    "th": {"style"},
    **MATHML_ATTRIBUTES,
}


def _highlight(code: str, lang: str) -> str:
    """Pygments spans for a fenced block; unknown languages fall back to escaped text."""
    try:
        lexer = get_lexer_by_name(lang) if lang else None
    except ClassNotFound:
        lexer = None
    if lexer is None:
        return escape(code)
    return highlight(code, lexer, _FORMATTER)


def fence_language(info: str) -> str:
    return info.strip().split(maxsplit=1)[0] if info.strip() else ""


def code_block_html(body_html: str, lang: str) -> str:
    """A code block's frame around its (already escaped or highlighted) body.

    A mermaid fence is marked for static/chat/diagrams.js, which draws it in the browser once the reply
    is finished (the source stays here as the fallback and for Copy)."""
    frame = "code-block mermaid" if lang == "mermaid" else "code-block"
    return (
        f'<div class="{frame}"><div class="code-head"><span>'
        f"{escape(lang or 'text')}</span>"
        '<button type="button" class="copy-btn" aria-label="Copy code">Copy</button></div>'
        f'<pre class="highlight"><code>{body_html}</code></pre></div>\n'
    )


def _render_fence(
    self: RendererProtocol, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    lang = fence_language(token.info)
    return code_block_html(_highlight(token.content, lang), lang)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    # html=False: raw HTML in model output is shown as text, never interpreted.
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    md.use(math_plugin)
    md.add_render_rule("fence", _render_fence)
    md.add_render_rule("code_block", _render_fence)
    return md


def render_markdown(text: str) -> str:
    """Sanitized HTML for untrusted Markdown text."""
    return sanitize(_parser().render(text))


def parser() -> MarkdownIt:
    """The shared, configured parser (markdown_stream renders pieces of a reply with it)."""
    return _parser()


def sanitize(html: str) -> str:
    """The allow-list cleaning every rendered fragment goes through."""
    return nh3.clean(
        html,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        # A link in a reply opens beside the chat, never in place of it (a half-written reply would go).
        set_tag_attribute_values={"a": {"target": "_blank"}},
        filter_style_properties={"text-align"},
    )
