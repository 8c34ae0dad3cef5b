"""The documentation under docs/, served by the app at /docs/ for anyone, logged in or not.

The pages are the same Markdown files `mkdocs build` turns into the docs site (mkdocs.yml): each is
rendered here with markdown-it-py and cleaned with nh3, as the chat renders replies (webapp/chat/markdown.py,
which core may not import: tests/test_architecture.py keeps core below the apps). A page's URL is its
path under docs/ (`/docs/configuration/models.md`; a folder's is its index.md), so the pages' relative
links (`../user-guide/api.md#embeddings`, `../screenshots/chat-light.png`) work unchanged, and headings get
the ids MkDocs gives them, so anchors do too. The sidebar is mkdocs.yml's `nav`.

Only Markdown files and images under the docs folder are served: a path that leaves the folder (`..`, a
link pointing outside it), names a hidden file, or has another suffix is a 404.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import nh3
import yaml
from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from markdown_it import MarkdownIt
from markdown_it.token import Token

IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".gif": "image/gif"}
_TAGS = {
    *("a", "blockquote", "br", "code", "del", "em", "hr", "img", "li", "ol", "p", "pre", "strong", "ul"),
    *("h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td"),
}
_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "code": {"class"},
    "ol": {"start"},
    **{f"h{level}": {"id"} for level in range(1, 7)},
}


def docs_dir() -> Path:
    return Path(getattr(settings, "MOONCAKE_DOCS_DIR", Path(settings.BASE_DIR) / "docs"))


def slugify(text: str) -> str:
    """A heading's id as MkDocs' toc extension makes it: ASCII, lower case, words joined by hyphens."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    words = re.sub(r"[^\w\s-]", "", ascii_text).strip().lower()
    return re.sub(r"[-\s]+", "-", words)


def _heading_ids(state: Any) -> None:
    """Give every heading its MkDocs id (a repeated one gets _1, _2, ... as there)."""
    seen: set[str] = set()
    tokens: list[Token] = state.tokens
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        inline = tokens[index + 1]
        children = inline.children or []
        text = "".join(child.content for child in children if child.type in ("text", "code_inline"))
        base = slug = slugify(text)
        count = 0
        while slug in seen:
            count += 1
            slug = f"{base}_{count}"
        seen.add(slug)
        token.attrSet("id", slug)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False})
    md.enable(["table", "strikethrough"])
    md.core.ruler.push("heading_ids", _heading_ids)
    return md


@dataclass(frozen=True, slots=True)
class Page:
    title: str
    html: str


@lru_cache(maxsize=128)
def _render(path: Path, mtime_ns: int) -> Page:
    text = path.read_text(encoding="utf-8")
    html = nh3.clean(
        _parser().render(text),
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel=None,
    )
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), path.stem)
    return Page(title=title.replace("`", ""), html=html)


def resolve(page: str, root: Path) -> Path | None:
    """The file under `root` that the URL path `page` names, or None: never one outside it."""
    parts = [part for part in page.split("/") if part]
    if any(part in (".", "..") or part.startswith(".") or "\\" in part for part in parts):
        return None
    if not parts or page.endswith("/"):
        parts.append("index.md")
    candidate = root.joinpath(*parts)
    if candidate.suffix not in (".md", *IMAGE_TYPES):
        return None
    try:
        resolved, base = candidate.resolve(strict=True), root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_relative_to(base) or not resolved.is_file():
        return None
    return resolved


def _nav_entries(items: Any, prefix: str = "/docs/") -> list[dict[str, Any]]:
    """mkdocs.yml's nav as (title, url or children) entries for the sidebar."""
    entries: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            entries.append({"title": Path(item).stem.replace("-", " ").capitalize(), "url": prefix + item})
        elif isinstance(item, dict):
            for title, value in item.items():
                if isinstance(value, str):
                    entries.append({"title": str(title), "url": prefix + value})
                else:
                    entries.append({"title": str(title), "children": _nav_entries(value, prefix)})
    return entries


@lru_cache(maxsize=4)
def _nav(config: Path, mtime_ns: int) -> list[dict[str, Any]]:
    try:
        loaded = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    return _nav_entries(loaded.get("nav") if isinstance(loaded, dict) else None)


def nav(root: Path) -> list[dict[str, Any]]:
    config = root.parent / "mkdocs.yml"
    try:
        return _nav(config, config.stat().st_mtime_ns)
    except OSError:
        return []


def docs_page(request: HttpRequest, page: str = "") -> HttpResponse | FileResponse:
    root = docs_dir()
    path = resolve(page, root)
    if path is None:
        raise Http404("No such documentation page")
    if path.suffix in IMAGE_TYPES:
        return FileResponse(path.open("rb"), content_type=IMAGE_TYPES[path.suffix])
    rendered = _render(path, path.stat().st_mtime_ns)
    context = {"page": rendered, "nav": nav(root), "current": request.path}
    return render(request, "core/docs_page.html", context)
