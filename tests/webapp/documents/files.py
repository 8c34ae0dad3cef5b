"""Documents made in the test: a PDF with real text per page (hand-written objects), a Word file, and the
two "document bombs" of the denial-of-service report (never shipped as files)."""

from __future__ import annotations

import io
import zipfile
import zlib


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF whose page i shows pages[i] (one line per text line) in Helvetica."""
    objects: list[bytes] = []
    count = len(pages)
    page_ids = [4 + 2 * i for i in range(count)]
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    kids = " ".join(f"{pid} 0 R" for pid in page_ids)
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        lines = []
        for line in text.splitlines() or [""]:
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            lines.append(f"({escaped}) Tj T*")
        stream = ("BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(lines) + " ET").encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {page_ids[i] + 1} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    return pdf_file(objects)


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of these objects, numbered from 1 (1: the catalog), with its cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def make_pdf_bomb(repeats: int = 3_000_000) -> bytes:
    """One page whose one content stream is `BT /F1 1 Tf ` + `(a) Tj ` * repeats + `ET`, Flate-compressed:
    31 KB at the reported 3,000,000 (21 MB inflated), which held a worker for minutes at about 1 GB."""
    content = zlib.compress(b"BT /F1 1 Tf " + b"(a) Tj " * repeats + b"ET", 9)
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents 5 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content + b"\nendstream",
        ]
    )


def make_docx_bomb(paragraphs: int = 7_000_000) -> bytes:
    """A Word file whose word/document.xml holds `paragraphs` empty <w:p/>: 40 MB unpacked at the reported
    7,000,000, which kept a worker "extracting" for over 14 minutes at 1 GB."""
    with zipfile.ZipFile(io.BytesIO(make_docx([("p", "x")]))) as source:
        parts = {info.filename: source.read(info) for info in source.infolist()}
    head = parts["word/document.xml"].partition(b"<w:body>")[0]
    parts["word/document.xml"] = head + b"<w:body>" + b"<w:p/>" * paragraphs + b"</w:body></w:document>"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return out.getvalue()


def make_docx(blocks: list[tuple[str, str]]) -> bytes:
    """A Word file: ("h1", text) headings, ("p", text) paragraphs, ("table", "a|b;c|d") tables."""
    import docx

    document = docx.Document()
    for kind, text in blocks:
        if kind.startswith("h"):
            document.add_heading(text, level=int(kind[1:]))
        elif kind == "table":
            rows = [r.split("|") for r in text.split(";")]
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
        else:
            document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
