"""Logging filters for Django's own request log.

Django logs a refused request (PermissionDenied, BadRequest: any 4xx it answers for an exception) as a
WARNING with the exception's traceback. A refusal is the server doing its job, not a fault: the traceback
only buries real errors (about 40 refused console clicks gave 40 tracebacks). One line is kept, with the
reason the exception gave, so an admin still sees who was refused what.
"""

from __future__ import annotations

import logging


class RefusalsOnOneLine(logging.Filter):
    """Drops the traceback of a 4xx request record and appends the exception's message instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if not isinstance(status, int) or not 400 <= status < 500 or not record.exc_info:
            return True
        exc = record.exc_info[1]
        reason = " ".join(str(exc).split()) if exc is not None else ""
        record.exc_info = None
        record.exc_text = None
        if reason and isinstance(record.args, tuple):
            record.msg = f"{record.msg} (%s)"
            record.args = (*record.args, reason)
        return True
