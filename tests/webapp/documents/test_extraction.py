"""Extraction per type, with the limits, corrupt files and the sniffing of uploads."""

from __future__ import annotations

import io

import pytest
from django.test import override_settings

from tests.webapp.documents.files import make_docx, make_pdf
from webapp.core.errors import UnsupportedMediaType
from webapp.documents.chunking import chunk_sections
from webapp.documents.extraction import ExtractionError, Section, extract
from webapp.documents.indexing import limits_from_settings
from webapp.documents.sniffing import kind_for


def run(kind: str, data: bytes, name: str = "f") -> tuple[list[Section], list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []
    limits = limits_from_settings()
    sections = extract(
        kind=kind, name=name, data=data, limits=limits, progress=lambda d, t: calls.append((d, t))
    )
    return sections, calls


def test_pdf_text_by_page_with_progress() -> None:
    sections, calls = run("pdf", make_pdf(["The moon is made of cake.", "", "Page three says hello."]))
    assert [(s.page, s.text.strip()) for s in sections] == [
        (1, "The moon is made of cake."),
        (3, "Page three says hello."),
    ]
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]


def test_pdf_page_limit() -> None:
    with (
        override_settings(MOONCAKE_DOCUMENTS_MAX_PAGES=2),
        pytest.raises(ExtractionError, match="3 pages; at most 2"),
    ):
        run("pdf", make_pdf(["a", "b", "c"]), "big.pdf")


def test_corrupt_pdf_is_a_clear_error() -> None:
    with pytest.raises(ExtractionError, match="could not be read as a PDF"):
        run("pdf", b"%PDF-1.4\n" + b"\x00garbage" * 100, "broken.pdf")
    truncated = make_pdf(["some text here"])[:120]
    with pytest.raises(ExtractionError, match=r"broken\.pdf"):
        run("pdf", truncated, "broken.pdf")


def test_encrypted_pdf_is_refused() -> None:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["secret"]))))
    writer.encrypt("pw")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(ExtractionError, match="password-protected"):
        run("pdf", out.getvalue(), "locked.pdf")


def test_pdf_without_text_says_so() -> None:
    with pytest.raises(ExtractionError, match="no text"):
        run("pdf", make_pdf(["", ""]), "scan.pdf")


def test_character_limit() -> None:
    with (
        override_settings(MOONCAKE_DOCUMENTS_MAX_CHARS=50),
        pytest.raises(ExtractionError, match="more than 50"),
    ):
        run("text", b"x" * 51, "long.txt")
    with (
        override_settings(MOONCAKE_DOCUMENTS_MAX_CHARS=30),
        pytest.raises(ExtractionError, match="more than 30"),
    ):
        run("pdf", make_pdf(["twenty characters ab", "twenty characters cd"]), "long.pdf")


def test_docx_headings_paragraphs_and_tables() -> None:
    data = make_docx(
        [
            ("p", "Preface text."),
            ("h1", "Pricing"),
            ("p", "Cake costs 3 euros."),
            ("table", "Size|Price;Large|5"),
        ]
    )
    sections, calls = run("docx", data)
    assert [(s.heading, s.text) for s in sections] == [
        ("", "Preface text."),
        ("Pricing", "Pricing\nCake costs 3 euros.\nSize | Price\nLarge | 5"),
    ]
    assert calls == [(0, 1), (1, 1)]


def test_corrupt_docx_is_a_clear_error() -> None:
    with pytest.raises(ExtractionError, match="could not be read as a Word document"):
        run("docx", b"PK\x03\x04" + b"not really a zip" * 10, "broken.docx")
    good = make_docx([("p", "hello")])
    with pytest.raises(ExtractionError, match="could not be read as a Word document"):
        run("docx", good[: len(good) // 2], "half.docx")


def test_markdown_sections_by_heading_but_not_inside_code() -> None:
    text = "Intro\n\n# Setup\nInstall it.\n```sh\n# not a heading\n```\n## Usage ##\nRun it."
    sections, _ = run("markdown", text.encode())
    assert [s.heading for s in sections] == ["", "Setup", "Usage"]
    assert "# not a heading" in sections[1].text


def test_html_is_text_only() -> None:
    html = (
        "<html><head><title>T</title><style>p{color:red}</style></head><body>"
        "<script>alert('x')</script><h1>Menu</h1><p>Moon &amp; cake</p>"
        "<h2>Prices</h2><ul><li>1 euro</li></ul>"
        "</body></html>"
    )
    sections, _ = run("html", html.encode())
    assert [(s.heading, s.text) for s in sections] == [
        ("Menu", "Menu\n\nMoon & cake"),
        ("Prices", "Prices\n\n1 euro"),
    ]
    assert not any("alert" in s.text or "color" in s.text for s in sections)


def test_text_and_code_decoding() -> None:
    sections, _ = run("code", "def f():\n    return 'é'\n".encode())
    assert sections[0].text.startswith("def f():") and sections[0].page is None
    sections, _ = run("text", "caf\xe9 latin-1".encode("cp1252"))
    assert sections[0].text == "café latin-1"
    sections, _ = run("text", "utf16 text".encode("utf-16"))
    assert sections[0].text == "utf16 text"


def test_empty_text_is_an_error() -> None:
    with pytest.raises(ExtractionError, match="contains no text"):
        run("text", b"   \n\n  ", "blank.txt")


@pytest.mark.parametrize(
    ("name", "head", "kind"),
    [
        ("a.pdf", b"%PDF-1.7 ...", "pdf"),
        ("a.docx", b"PK\x03\x04....", "docx"),
        ("notes.MD", b"# hi", "markdown"),
        ("a.txt", b"hi", "text"),
        ("page.html", b"<p>", "html"),
        ("main.rs", b"fn main() {}", "code"),
        ("Dockerfile", b"FROM x", "code"),
    ],
)
def test_kind_by_extension_and_content(name: str, head: bytes, kind: str) -> None:
    assert kind_for(name, head) == kind


@pytest.mark.parametrize(
    ("name", "head", "message"),
    [
        ("photo.png", b"\x89PNG", "not supported"),
        ("fake.pdf", b"hello", "not a PDF"),
        ("old.docx", b"\xd0\xcf\x11\xe0", "not a Word .docx"),
        ("sneaky.txt", b"%PDF-1.4", "binary"),
        ("bin.txt", b"ab\x00cd", "binary"),
    ],
)
def test_sniffing_refuses_mismatches(name: str, head: bytes, message: str) -> None:
    with pytest.raises(UnsupportedMediaType, match=message):
        kind_for(name, head)


def test_chunks_keep_page_and_heading_and_size() -> None:
    long = " ".join(f"Sentence number {i} is here." for i in range(200))
    sections = [Section(text="Short first page.", page=1), Section(text=long, page=2, heading="Body")]
    chunks = chunk_sections(sections, size=300)
    assert chunks[0].text == "Short first page." and chunks[0].page == 1
    rest = chunks[1:]
    assert len(rest) > 5 and all(c.page == 2 and c.heading == "Body" for c in rest)
    assert all(len(c.text) <= 300 for c in chunks)
    # Nothing is lost or duplicated: the words come back in order.
    assert " ".join(c.text for c in rest).split() == long.split()


def test_chunks_join_short_paragraphs_and_cut_unbroken_text() -> None:
    chunks = chunk_sections([Section(text="one\n\ntwo\n\nthree")], size=100)
    assert [c.text for c in chunks] == ["one\n\ntwo\n\nthree"]
    chunks = chunk_sections([Section(text="x" * 250)], size=100)
    assert [len(c.text) for c in chunks] == [100, 100, 50]
