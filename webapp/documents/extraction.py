"""Text out of each kind of document, as sections that know their page or heading, within the limits.

Every failure a file can cause (corrupt, encrypted, over a limit, no text) is an ExtractionError whose
message the attachment shows; anything else is a bug and is logged by the task. Pure Python without
Django: it runs in a child process under time and memory bounds (webapp.documents.isolation), and a
compressed file is measured before it is parsed (webapp.documents.unpacking).
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser

from webapp.documents.unpacking import UnpackError, UnpackLimits, check_pdf, check_zip

# Document.Kind's values; the model is not imported here (see the docstring).
PDF, DOCX, MARKDOWN, HTML = "pdf", "docx", "markdown", "html"
Progress = Callable[[int, int], None]

logger = logging.getLogger(__name__)


class ExtractionError(Exception):
    """The file cannot become text; the message is for the person who uploaded it."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one document may hold (settings MOONCAKE_DOCUMENTS_*)."""

    max_pages: int
    max_chars: int
    unpack: UnpackLimits


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text from one page (PDF) or under one heading (the rest)."""

    text: str
    page: int | None = None
    heading: str = ""


def extract(*, kind: str, name: str, data: bytes, limits: Limits, progress: Progress) -> list[Section]:
    """The document's sections; `progress(done, total)` is called as pages are read."""
    try:
        if kind == PDF:
            check_pdf(name, data, limits.unpack)
        elif kind == DOCX:
            check_zip(name, data, limits.unpack)
    except UnpackError as exc:
        raise ExtractionError(str(exc)) from exc
    if kind == PDF:
        sections = _pdf(name, data, limits, progress)
    else:
        progress(0, 1)
        if kind == DOCX:
            sections = _docx(name, data, limits)
        else:
            text = _decode(name, data)
            if kind == MARKDOWN:
                sections = _markdown(text)
            elif kind == HTML:
                sections = _html(text)
            else:
                sections = [Section(text=text)]
        progress(1, 1)
    sections = [s for s in sections if s.text.strip()]
    total = sum(len(s.text) for s in sections)
    if total == 0:
        hint = " (a scanned PDF holds images of text, which cannot be read)" if kind == PDF else ""
        raise ExtractionError(f"{name} contains no text{hint}.")
    _check_chars(name, total, limits)
    return sections


def _check_chars(name: str, count: int, limits: Limits) -> None:
    limit = limits.max_chars
    if count > limit:
        raise ExtractionError(f"{name} has more than {limit:,} characters of text; split it into parts.")


def _decode(name: str, data: bytes) -> str:
    encoding = "utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        pass
    # Not UTF-8: Windows-1252 decodes every byte a legacy text file holds; control bytes mean binary.
    text = data.decode("cp1252", errors="replace")
    if sum(ch < " " and ch not in "\r\n\t\f" for ch in text[:4096]) > 8:
        raise ExtractionError(f"{name} is not a text file.")
    return text


def _pdf(name: str, data: bytes, limits: Limits, progress: Progress) -> list[Section]:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise ExtractionError(f"{name} is password-protected; remove the password and upload it again.")
        count = len(reader.pages)
    except (ExtractionError, MemoryError):
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise ExtractionError(f"{name} could not be read as a PDF (the file is damaged).") from exc
    limit = limits.max_pages
    if count > limit:
        raise ExtractionError(f"{name} has {count} pages; at most {limit} are allowed.")
    if count == 0:
        raise ExtractionError(f"{name} has no pages.")
    sections: list[Section] = []
    chars = 0
    progress(0, count)
    for number, page in enumerate(reader.pages, start=1):
        try:
            text = page.extract_text() or ""
        except MemoryError:
            raise
        except LimitReachedError as exc:  # a stream past pypdf's own cap, which the child lowers to ours
            raise ExtractionError(
                f"{name} unpacks to more than {limits.unpack.max_bytes / 1048576:g} MB, the most a "
                "document may; split it into parts."
            ) from exc
        except Exception as exc:  # pypdf raises many types on broken content streams; one page's is enough
            logger.info("PDF page %s of %s unreadable: %r", number, name, exc)
            raise ExtractionError(f"{name}: page {number} could not be read (the file is damaged).") from exc
        chars += len(text)
        _check_chars(name, chars, limits)
        sections.append(Section(text=text, page=number))
        progress(number, count)
    return sections


def _docx(name: str, data: bytes, limits: Limits) -> list[Section]:
    damaged = f"{name} could not be read as a Word document (the file is damaged)."
    if not _is_docx(data):
        raise ExtractionError(damaged)
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml.ns import qn
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(io.BytesIO(data))
        # Looked up once: python-docx's paragraph.style searches every style, per paragraph.
        styles = {s.style_id: s.name or "" for s in document.styles if s.type == WD_STYLE_TYPE.PARAGRAPH}
        default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    except MemoryError:
        raise
    except Exception as exc:  # python-docx raises KeyError, lxml errors, ValueError... for broken parts
        raise ExtractionError(damaged) from exc
    default_style = (default.name if default is not None else "") or ""
    sections: list[Section] = []
    heading, lines, chars = "", list[str](), 0
    # Paragraphs and tables in body order.
    for block in document.element.body.iterchildren():
        if block.tag == qn("w:p"):
            text = Paragraph(block, document).text.strip()
            if not text:
                continue
            chars += len(text)
            style = styles.get(block.style or "", default_style)
            if style.lower().startswith(("heading", "title")):
                sections.append(Section(text="\n".join(lines), heading=heading))
                heading, lines = text[:300], [text]
            else:
                lines.append(text)
        elif block.tag == qn("w:tbl"):
            table = Table(block, document)
            for row in table.rows:
                cells = [cell.text.strip() for cell in row.cells]
                if any(cells):
                    lines.append(" | ".join(cells))
                    chars += sum(len(c) for c in cells)
        _check_chars(name, chars, limits)
    sections.append(Section(text="\n".join(lines), heading=heading))
    return sections


def _is_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, ValueError):
        return False


_MD_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$")


def _markdown(text: str) -> list[Section]:
    sections: list[Section] = []
    heading, lines, fenced = "", list[str](), False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else _MD_HEADING.match(line)
        if match:
            sections.append(Section(text="\n".join(lines), heading=heading))
            heading, lines = match.group(2)[:300], [line]
        else:
            lines.append(line)
    sections.append(Section(text="\n".join(lines), heading=heading))
    return sections


class _HtmlText(HTMLParser):
    """Visible text by heading; scripts, styles and other non-content elements are skipped."""

    SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
    BLOCK = {"p", "div", "br", "li", "tr", "section", "article", "pre", "blockquote", "table", "ul", "ol"}
    HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self.heading = ""
        self.parts: list[str] = []
        self.skipping = 0
        self.in_heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.HEADINGS and not self.skipping:
            self.in_heading = []
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.HEADINGS and self.in_heading is not None:
            title = " ".join("".join(self.in_heading).split())
            self.in_heading = None
            self.sections.append(Section(text=_tidy("".join(self.parts)), heading=self.heading))
            self.heading, self.parts = title[:300], [title, "\n"]
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        if self.in_heading is not None:
            self.in_heading.append(data)
        else:
            self.parts.append(data)

    def finish(self) -> list[Section]:
        self.close()
        self.sections.append(Section(text=_tidy("".join(self.parts)), heading=self.heading))
        return self.sections


def _tidy(text: str) -> str:
    lines = (" ".join(line.split()) for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _html(text: str) -> list[Section]:
    parser = _HtmlText()
    parser.feed(text)
    return parser.finish()
