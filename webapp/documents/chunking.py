"""Sections to chunks of about MOONCAKE_DOCUMENTS_CHUNK_CHARS, split at paragraphs, then sentences, then
words; a chunk never spans two pages or two headings, so each citation names one place."""

from __future__ import annotations

import re
from dataclasses import dataclass

from webapp.documents.extraction import Section

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    page: int | None
    heading: str


def chunk_sections(sections: list[Section], *, size: int) -> list[Chunk]:
    return [
        Chunk(text=text, page=section.page, heading=section.heading)
        for section in sections
        for text in _split(section.text, size)
    ]


def _split(text: str, size: int) -> list[str]:
    out: list[str] = []
    current = ""
    for piece, joiner in _pieces(text, size):
        if current and len(current) + len(joiner) + len(piece) > size:
            out.append(current)
            current = piece
        else:
            current = f"{current}{joiner}{piece}" if current else piece
    if current.strip():
        out.append(current)
    return out


def _pieces(text: str, size: int) -> list[tuple[str, str]]:
    """(piece, what joins it to the one before): paragraphs up to `size`, longer ones cut at sentences,
    then at spaces, then anywhere. Pieces of one paragraph rejoin with a space, paragraphs with a blank
    line."""
    pieces: list[tuple[str, str]] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        joiner = "\n\n"
        for sentence in [paragraph] if len(paragraph) <= size else _SENTENCE_END.split(paragraph):
            while len(sentence) > size:
                cut = sentence.rfind(" ", size // 2, size)
                cut = cut if cut > 0 else size
                pieces.append((sentence[:cut].strip(), joiner))
                joiner, sentence = " ", sentence[cut:].strip()
            if sentence:
                pieces.append((sentence, joiner))
                joiner = " "
    return pieces
