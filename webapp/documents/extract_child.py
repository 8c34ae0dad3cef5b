"""The child process that reads one document, started by webapp.documents.isolation.

stdin: one JSON line (kind, name, limits, bounds), then the file's bytes. stdout: JSON lines, any number
of {"progress": [done, total]}, then one of {"sections": [[text, page, heading], ...]}, {"error": message},
{"memory": true} or {"crash": traceback}. It imports no Django: the parent (webapp.documents.isolation)
owns the database and kills this process when it runs past its wall-clock bound or is told to stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import traceback
from typing import IO, Any

from webapp.documents.extraction import PDF, ExtractionError, Limits, extract
from webapp.documents.unpacking import UnpackLimits

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The bound on processor time is a backstop should the parent die without killing us; the parent's
# wall clock is the bound that answers the user.
_CPU_GRACE_S = 5
_NICE = 10  # below the web server and its engine: a long document must not stall generations


def _die_with_parent(parent: int) -> None:
    # Not Linux: no prctl, and the processor-time limit alone ends an orphan.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)


def _bound(memory_bytes: int, seconds: float) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    cpu = int(seconds) + _CPU_GRACE_S
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    with contextlib.suppress(OSError):
        os.nice(_NICE)


def _peak_bytes() -> int:
    """The most address space this process has held (Linux); 0 where that cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _send(out: IO[bytes], message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def main() -> int:
    header = json.loads(sys.stdin.buffer.readline())
    _die_with_parent(int(header["parent"]))
    _bound(int(header["memory_bytes"]), float(header["seconds"]))
    data = sys.stdin.buffer.read()
    # Messages go out on a descriptor of their own; whatever a library prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    unpack = UnpackLimits(**header["unpack"])
    limits = Limits(max_pages=int(header["max_pages"]), max_chars=int(header["max_chars"]), unpack=unpack)
    outcome: dict[str, Any]
    try:
        if header["kind"] == PDF:
            import pypdf.filters

            # pypdf's own cap per stream, lowered to ours: it covers what our scan cannot see (filter chains).
            pypdf.filters.ZLIB_MAX_OUTPUT_LENGTH = min(pypdf.filters.ZLIB_MAX_OUTPUT_LENGTH, unpack.max_bytes)
        sections = extract(
            kind=header["kind"],
            name=header["name"],
            data=data,
            limits=limits,
            progress=lambda done, total: _send(out, {"progress": [done, total]}),
        )
        outcome = {"sections": [[s.text, s.page, s.heading] for s in sections]}
    except ExtractionError as exc:
        # lxml reports an allocation that failed as a parse error ("unknown error"): a parser's failure
        # after most of the bound was in use was the bound.
        memory = exc.__cause__ is not None and _peak_bytes() > int(header["memory_bytes"]) // 2
        outcome = {"memory": True} if memory else {"error": str(exc)}
    except MemoryError:
        outcome = {"memory": True}
    except Exception:
        outcome = {"crash": traceback.format_exc()}
    # Sent after the handlers: by now the frames (and what they held) of a failure are freed.
    _send(out, outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
