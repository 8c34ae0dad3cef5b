"""Request bodies over the limit, refused at Daphne's socket before they are read.

Twisted receives a request's whole body (into memory, then a temporary file) before Daphne starts the ASGI
application, so no ASGI middleware can stop a 100 MB upload from being read: it can only refuse it after.
Here each request's Twisted hooks are wrapped: `gotLength` (headers done) refuses a declared Content-Length
over the path's limit (webapp.core.body_limits) and `handleContentChunk` stops a chunked body the moment
it passes it. Either way the 413 is written at once, the connection closed, and the application never runs.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote, urlsplit

from webapp.core.body_limits import body_limit, refusal

logger = logging.getLogger(__name__)


class BodyGuard:
    """The wrapped hooks of one Twisted request, and how many body bytes it has taken."""

    def __init__(self, request: Any) -> None:
        self.request = request
        self.limit: int | None = None
        self.path = "/"
        self.received = 0
        self.refused = False
        self._got_length = request.gotLength
        self._handle_chunk = request.handleContentChunk
        self._request_received = request.requestReceived

    def got_length(self, length: int | None) -> None:
        # The request line is all Twisted has parsed yet: the channel holds its target.
        target = bytes(getattr(self.request.channel, "_path", b"/") or b"/")
        self.path = unquote(urlsplit(target.decode("latin-1")).path or "/")
        self.limit = body_limit(self.path)
        if self.limit is not None and length is not None and length > self.limit:
            self.refuse(f"a declared {length}-byte body")
            return
        self._got_length(length)

    def handle_chunk(self, data: bytes) -> None:
        if self.refused:
            return
        self.received += len(data)
        if self.limit is not None and self.received > self.limit:
            self.refuse(f"a body past {self.limit} bytes")
            return
        self._handle_chunk(data)

    def request_received(self, command: bytes, path: bytes, version: bytes) -> None:
        # The rest of a refused body may already sit in Twisted's buffer: it must not start the application.
        if not self.refused:
            self._request_received(command, path, version)

    def refuse(self, what: str) -> None:
        assert self.limit is not None
        self.refused = True
        channel = self.request.channel
        # Twisted answers "Expect: 100-continue" right after gotLength: a client waiting for it gets the 413.
        self.request.requestHeaders.removeHeader(b"expect")
        content_type, body = refusal(self.path, self.limit)
        head = (
            "HTTP/1.1 413 Content Too Large\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n"
        )
        if channel is not None and channel.transport is not None:
            channel.transport.write(head.encode("latin-1") + body)
            channel.loseConnection()
        logger.info("Refused %s for %s (limit %d bytes)", what, self.path, self.limit)


def guard_request_body(request: Any) -> None:
    """Install the guard on a Twisted request that has just been made (before its headers are read)."""
    guard = BodyGuard(request)
    request.gotLength = guard.got_length
    request.handleContentChunk = guard.handle_chunk
    request.requestReceived = guard.request_received
