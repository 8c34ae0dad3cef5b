"""Time the chat's Markdown rendering of a growing reply: whole re-render per update vs incremental.

    .venv/bin/python bench/markdown_render.py [--tokens 20000] [--every 40]

A reply of --tokens words (about one token each) is streamed, and rendered after every --every tokens,
as the chat does every BROADCAST_INTERVAL_S while a reply streams. Prints both totals and the slowest
single update, and checks that the final HTML of both ways is identical.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.test")

import django

django.setup()

from webapp.chat.markdown import render_markdown  # noqa: E402
from webapp.chat.markdown_stream import IncrementalMarkdown  # noqa: E402

WORDS = [
    "the",
    "model",
    "writes",
    "a",
    "reply",
    "with",
    "some",
    "**bold**",
    "words",
    "and",
    "`inline",
    "code`",
    "plus",
    "a",
    "[link](https://x.y)",
]


def reply_tokens(count: int, seed: int = 0) -> list[str]:
    """A realistic mix: paragraphs, headings, lists, code fences and tables, as whitespace-led tokens."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        kind = rng.choice(["para", "para", "list", "code", "table", "heading"])
        if kind == "para":
            out += [" " + rng.choice(WORDS) for _ in range(rng.randint(20, 80))] + ["\n\n"]
        elif kind == "heading":
            out += ["## Section", " " + rng.choice(WORDS), "\n\n"]
        elif kind == "list":
            for _ in range(rng.randint(3, 8)):
                out += ["- item"] + [" " + rng.choice(WORDS) for _ in range(rng.randint(3, 12))] + ["\n"]
            out.append("\n")
        elif kind == "code":
            out.append("```python\n")
            for i in range(rng.randint(5, 30)):
                out += ["def", f" f{i}", "(x):", "\n", "    return", " x", f" + {i}", "\n"]
            out.append("```\n\n")
        else:
            out += ["| a | b |", "\n", "|---|---|", "\n"]
            for i in range(rng.randint(3, 10)):
                out += [f"| {i} |", f" {rng.choice(WORDS)} |", "\n"]
            out.append("\n")
    return out[:count]


def stream(tokens: list[str], every: int, render: Callable[[str], str]) -> tuple[float, float, str]:
    text, total, worst, html = "", 0.0, 0.0, ""
    for i, token in enumerate(tokens, 1):
        text += token
        if i % every == 0 or i == len(tokens):
            start = time.perf_counter()
            html = render(text)
            spent = time.perf_counter() - start
            total, worst = total + spent, max(worst, spent)
    return total, worst, html


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=40, help="tokens between renders (the 50 ms broadcast)")
    args = parser.parse_args()
    tokens = reply_tokens(args.tokens)
    updates = -(-len(tokens) // args.every)
    print(f"{len(tokens)} tokens, {len(''.join(tokens))} chars, {updates} updates")
    new_total, new_worst, new_html = stream(tokens, args.every, IncrementalMarkdown().render)
    print(f"incremental:  total {new_total:8.2f} s   slowest update {new_worst * 1000:7.1f} ms")
    old_total, old_worst, old_html = stream(tokens, args.every, render_markdown)
    print(f"whole render: total {old_total:8.2f} s   slowest update {old_worst * 1000:7.1f} ms")
    print(f"speed-up {old_total / new_total:.1f}x; final HTML identical: {old_html == new_html}")


if __name__ == "__main__":
    main()
