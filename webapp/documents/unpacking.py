"""How much a compressed document unpacks to, measured before any parser sees it.

A few kilobytes of deflate can stand for gigabytes, and a parser handed that spends minutes and memory
before any limit of ours is reached. So a .docx is refused on what its zip directory declares (zipfile
never yields more than a member's declared size), and a PDF on what its Flate streams inflate to, counted
by streaming them through zlib with a cap; only the counts are kept, never the bytes.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from dataclasses import dataclass


class UnpackError(Exception):
    """The file unpacks past a bound; the message is for the person who uploaded it."""


@dataclass(frozen=True, slots=True)
class UnpackLimits:
    max_bytes: int  # everything the file unpacks to, together
    max_ratio: int  # unpacked / packed for one member or stream; 0: no ratio bound
    ratio_floor: int = 1 << 20  # members smaller than this unpack to too little to matter


_CHUNK = 1 << 16
_MB = 1 << 20
# A stream's keyword (not endstream's) and the dictionary in front of it.
_STREAM = re.compile(rb"(?<!end)stream(?:\r\n|\n|\r)")
_DICT_WINDOW = 4096
# Streams text extraction never decodes: images, and TrueType/CFF font programs (pypdf decodes only
# Type 1 programs, /FontFile, whose dictionary has /Length2).
_NOT_DECODED = re.compile(
    rb"/Subtype\s*/(?:Image|Type1C|CIDFontType0C|OpenType)\b|/Length1\b(?![\s\S]*/Length2\b)"
)


def check_zip(name: str, data: bytes, limits: UnpackLimits) -> None:
    """Refuse a zip-based document whose members together, or any one for its size, unpack too far."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        return  # the parser says it is damaged, with its own message
    total = 0
    for member in members:
        total += member.file_size
        _check_total(name, total, limits)
        _check_ratio(name, member.file_size, member.compress_size, limits)


def check_pdf(name: str, data: bytes, limits: UnpackLimits) -> None:
    """Refuse a PDF whose Flate streams that text extraction reads inflate too far."""
    total, position = 0, 0
    while match := _STREAM.search(data, position):
        start = match.end()
        header = data[max(0, match.start() - _DICT_WINDOW) : match.start()]
        header = header[header.rfind(b"obj") + 1 :]
        if _NOT_DECODED.search(header):
            position = start
            continue
        inflated, consumed = _inflate(name, data, start, limits, budget=limits.max_bytes - total)
        total += inflated
        _check_total(name, total, limits)
        position = start + max(consumed, 1)


def _inflate(name: str, data: bytes, start: int, limits: UnpackLimits, budget: int) -> tuple[int, int]:
    """(bytes out, bytes in) of the zlib stream at `start`, stopping a byte past `budget`; (0, 0) for
    data that is not zlib (uncompressed, or another filter: the parser's own caps and ours apply)."""
    inflater = zlib.decompressobj()
    out, position = 0, start
    try:
        while not inflater.eof and position < len(data) and out <= budget:
            piece = data[position : position + _CHUNK]
            position += len(piece)
            chunk = inflater.decompress(piece, _CHUNK)
            while True:
                out += len(chunk)
                if out > budget or inflater.eof or not inflater.unconsumed_tail:
                    break
                chunk = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
            consumed = position - start - len(inflater.unused_data) - len(inflater.unconsumed_tail)
            _check_ratio(name, out, consumed, limits)
    except zlib.error:
        # Damaged after some output: pypdf keeps what inflated before the damage, so it counts too.
        return out, (position - start) if out else 0
    return out, position - start - len(inflater.unused_data) - len(inflater.unconsumed_tail)


def _check_total(name: str, total: int, limits: UnpackLimits) -> None:
    if total > limits.max_bytes:
        raise UnpackError(
            f"{name} unpacks to more than {limits.max_bytes / _MB:g} MB, the most a document may; "
            "split it into parts."
        )


def _check_ratio(name: str, unpacked: int, packed: int, limits: UnpackLimits) -> None:
    if limits.max_ratio and unpacked > limits.ratio_floor and unpacked > limits.max_ratio * max(packed, 1):
        raise UnpackError(
            f"{name} holds a part that unpacks to more than {limits.max_ratio} times its size, "
            "which documents never need; it was not read."
        )
