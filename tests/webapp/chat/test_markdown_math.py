"""Replies' LaTeX as MathML, Mermaid fences marked for the browser, and links that open a new tab: the
final render (render_markdown) and the streaming one (IncrementalMarkdown) must agree on all of it."""

from __future__ import annotations

import re
import time

import pytest

from webapp.chat.markdown import render_markdown
from webapp.chat.markdown_stream import IncrementalMarkdown
from webapp.chat.math import MATHML_ATTRIBUTES, MATHML_TAGS, to_mathml


def streamed(text: str) -> str:
    """The streaming renderer's HTML after it has seen every prefix of `text` (as a reply arrives)."""
    inc = IncrementalMarkdown()
    html = ""
    for end in range(1, len(text) + 1):
        html = inc.render(text[:end])
    return html


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Euler: $e^{i\\pi}+1=0$.", '<math display="inline">'),
        ("Inline \\(a+b\\) here.", '<math display="inline">'),
        ("$$\n\\frac{1}{2}\n$$", '<div class="math-display"><math display="block">'),
        ("\\[\nx^2\n\\]", '<div class="math-display"><math display="block">'),
        ("$$ x $$", '<div class="math-display"><math display="block">'),
        ("So $$x=1$$ inside a sentence.", '<p>So <math display="block">'),  # stays inside the <p>
        ("where:\n$$\ny\n$$", '<p>where:</p>\n<div class="math-display">'),
        ("- item\n  $$\n  z\n  $$", '<li>item<div class="math-display">'),
    ],
)
def test_math_becomes_mathml(text: str, expected: str) -> None:
    html = render_markdown(text)
    assert expected in html
    assert "$" not in re.sub(r"<[^>]+>", "", html).replace("$5", "")


@pytest.mark.parametrize(
    "text",
    [
        "It costs $5 and $10.",
        "Between $5 and $10 a day.",
        "$ 5 and 6 $",  # space after the opener
        "pay $x $ later",  # space before the closer
        "from $1 to $2",
        "a $x$5",  # closer followed by a digit
        "\\$x$ escaped",
        "$$$",
        "price: $$ alone",
    ],
)
def test_prices_and_lone_dollars_stay_text(text: str) -> None:
    html = render_markdown(text)
    assert "<math" not in html
    assert "$" in html


def test_code_is_never_math() -> None:
    html = render_markdown("Use `$x$` and `\\(y\\)`.\n\n```\n$$\nz\n$$\n```\n\n    $indented$\n")
    assert "<math" not in html
    assert "<code>$x$</code>" in html and "<code>\\(y\\)</code>" in html
    assert "$$\nz\n$$" in html and "$indented$" in html


@pytest.mark.parametrize("latex", ["\\frac{", "\\begin{foo}", "\\left(", "x^"])
def test_invalid_latex_is_shown_as_code(latex: str) -> None:
    html = render_markdown(f"bad ${latex}$ here")
    if "<math" not in html:  # latex2mathml rejected it: the source, escaped, as code
        assert f'<code class="math-source">{latex}</code>' in html
    block = render_markdown(f"$$\n{latex}\n$$")
    assert "<math" in block or '<pre class="math-source">' in block


def test_converter_errors_never_escape() -> None:
    # Whatever latex2mathml raises (its own errors, IndexError, ...) becomes code, never a 500.
    for latex in ["\\frac{", "\\begin{matrix}", "}", "\\sqrt[", "_", "^^", "\\end{x}", "&", "\\\\"]:
        out = to_mathml(latex, display=False, block=False)
        assert out.startswith(("<math", '<code class="math-source">'))
    assert to_mathml("x" * 5000, display=True, block=True).startswith('<pre class="math-source">')


def test_hostile_latex_is_sanitized() -> None:
    html = render_markdown(
        "$\\href{javascript:alert(1)}{x} \\style{background:url(https://evil.example/)}{y} "
        "\\color{red}{z}$ and $<script>alert(1)</script>$ and $\\text{<img src=x onerror=alert(1)>}$"
    )
    assert "<math" in html
    assert "href" not in html and "javascript" not in html
    assert "style=" not in html and "url(" not in html
    assert "<script" not in html and "<img" not in html and "onerror=" not in html.replace("&lt;", "")
    assert 'mathcolor="red"' in html  # a presentation attribute latex2mathml emits is kept


def test_sanitizer_allows_only_mathml_presentation() -> None:
    assert "annotation-xml" not in MATHML_TAGS and "maction" not in MATHML_TAGS
    for attrs in MATHML_ATTRIBUTES.values():
        assert not attrs & {"href", "style", "xlink:href", "src", "class", "id"}
        assert not [a for a in attrs if a.startswith("on")]
    # A tag outside the set, written as raw HTML, is escaped text (html=False) whatever it is.
    html = render_markdown('<math><maction actiontype="statusline"><mtext>x</mtext></maction></math>')
    assert "<maction" not in html and "&lt;math&gt;" in html


def test_half_streamed_display_math_shows_its_source() -> None:
    html = render_markdown("Before\n\n$$\n\\frac{a}{b}\n\nstill going")
    assert "<math" not in html
    assert '<pre class="math-source"><code>$$\n\\frac{a}{b}\n\nstill going</code></pre>' in html
    assert html.startswith("<p>Before</p>")


MIXED = """Intro with $a^2+b^2=c^2$ and prices $5 and $10.

$$
\\int_0^1 x\\,dx = \\frac{1}{2}

\\sum_i i
$$

Then \\(x\\) and \\[y\\] inline, `$not$` code; see [docs](https://example.com/a?b=1).

- list $\\alpha$
- where:
  $$
  z
  $$

\\[
\\frac{a}{b
\\]

```mermaid
graph TD; A-->B
```
tail $$ x
"""


def test_streaming_render_agrees_at_every_prefix() -> None:
    inc = IncrementalMarkdown()
    for end in range(len(MIXED) + 1):
        assert inc.render(MIXED[:end]) == render_markdown(MIXED[:end]), MIXED[:end]


@pytest.mark.parametrize("render", [render_markdown, streamed], ids=["final", "streaming"])
def test_links_open_in_a_new_tab(render: object) -> None:
    assert callable(render)
    html = render("See [docs](https://example.com/x) or <https://example.org> or [mail](mailto:a@b.c).\n")
    links = re.findall(r"<a [^>]*>", html)
    assert len(links) == 3
    for link in links:
        assert 'target="_blank"' in link
        assert "noopener" in link and "noreferrer" in link
    # Other schemes are still dropped, whatever they are.
    bad = render("[x](javascript:alert(1)) [y](data:text/html,hi) [z](file:///etc/passwd)\n")
    assert "javascript:" not in bad.replace("(javascript:", "") and "href" not in bad


@pytest.mark.parametrize("render", [render_markdown, streamed], ids=["final", "streaming"])
def test_mermaid_fence_is_marked_for_the_browser(render: object) -> None:
    assert callable(render)
    html = render("```mermaid\ngraph TD; A-->B\n```\n\n```python\nx = 1\n```\n")
    assert html.count('<div class="code-block mermaid">') == 1
    assert html.count('<div class="code-block">') == 1
    assert "A--&gt;B" in html  # the source stays, escaped, as the fallback


def test_many_unmatched_openers_stay_linear() -> None:
    # Each opener without a closer must not rescan the rest of the paragraph: streamed replies are
    # re-rendered on every update, so a quadratic scan would stall the event loop.
    for text in ["$5 and " * 20_000, "\\( " * 20_000, "$$ a " * 20_001]:
        started = time.perf_counter()
        render_markdown(text)
        assert time.perf_counter() - started < 3.0
