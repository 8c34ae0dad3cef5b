"""Which kind of document an upload is: its extension says what it claims, its first bytes must agree."""

from __future__ import annotations

from pathlib import PurePath

from webapp.core.errors import UnsupportedMediaType
from webapp.documents.models import Document

Kind = Document.Kind

_CODE = {
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".java", ".kt", ".kts", ".scala", ".c",
    ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cs", ".go", ".rs", ".rb", ".php", ".swift", ".m", ".mm",
    ".sh", ".bash", ".zsh", ".fish", ".ps1", ".pl", ".lua", ".r", ".jl", ".sql", ".css", ".scss", ".less",
    ".json", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".xml", ".proto", ".graphql", ".dart",
    ".ex", ".exs", ".erl", ".hs", ".ml", ".clj", ".vue", ".svelte", ".dockerfile", ".makefile", ".cmake",
    ".gradle", ".tf", ".zig", ".nim", ".v", ".vhd", ".asm", ".s", ".bat", ".env", ".csv", ".tsv",
}  # fmt: skip
_BY_EXTENSION: dict[str, str] = {
    ".pdf": Kind.PDF,
    ".docx": Kind.DOCX,
    ".md": Kind.MARKDOWN,
    ".markdown": Kind.MARKDOWN,
    ".txt": Kind.TEXT,
    ".text": Kind.TEXT,
    ".log": Kind.TEXT,
    ".rst": Kind.TEXT,
    ".html": Kind.HTML,
    ".htm": Kind.HTML,
    **dict.fromkeys(_CODE, Kind.CODE),
}
_NAMED = {"dockerfile": Kind.CODE, "makefile": Kind.CODE, "readme": Kind.TEXT, "license": Kind.TEXT}

SUPPORTED = "PDF, Word (.docx), Markdown, plain text, HTML and source code files"
# The accept attribute of the file inputs.
ACCEPT = ",".join(sorted({".pdf", ".docx", ".md", ".markdown", ".txt", ".html", ".htm", *_CODE}))


def kind_for(name: str, head: bytes) -> str:
    """The document kind of a file called `name` starting with `head`; UnsupportedMediaType otherwise."""
    path = PurePath(name)
    kind = _BY_EXTENSION.get(path.suffix.lower()) or _NAMED.get(path.name.lower())
    if kind is None:
        raise UnsupportedMediaType(
            f"{name}: this file type is not supported. Attach {SUPPORTED}.", code="unsupported_type"
        )
    if kind == Kind.PDF:
        if b"%PDF-" not in head[:1024]:
            raise UnsupportedMediaType(
                f"{name} is not a PDF (its content says otherwise).", code="bad_content"
            )
    elif kind == Kind.DOCX:
        if not head.startswith(b"PK\x03\x04"):
            raise UnsupportedMediaType(
                f"{name} is not a Word .docx file (an old .doc must be saved as .docx first).",
                code="bad_content",
            )
    elif head.startswith((b"%PDF-", b"PK\x03\x04")) or b"\x00" in head:
        raise UnsupportedMediaType(
            f"{name} looks like a binary file, not text. Attach {SUPPORTED}.", code="bad_content"
        )
    return kind
