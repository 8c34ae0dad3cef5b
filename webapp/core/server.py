"""Daphne with a graceful stop: `python -m webapp.core.server --host H --port P`.

Daphne on its own cancels every running application on SIGTERM. Here the first SIGTERM/SIGINT closes the
listening sockets (no new connections), waits until the engines have no running or waiting requests and
no HTTP response is still streaming (at most MOONCAKE_DRAIN_TIMEOUT seconds), then stops the reactor and
unloads the models. A second signal stops at once. Open WebSockets do not hold the stop up: chat
generations run in the engine, which the drain waits for.
"""

from __future__ import annotations

# daphne.server installs the asyncio Twisted reactor; it must be imported before anything touches Twisted.
import daphne.server  # isort:skip

import argparse
import logging
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from daphne.access import AccessLogGenerator
from daphne.endpoints import build_endpoint_description_strings
from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import reactor as _reactor

# Twisted's reactor is typed as a bag of interfaces; treat it as the dynamic object it is.
reactor: Any = _reactor

logger = logging.getLogger("mooncake.server")

DRAIN_POLL_SECONDS = 0.25
# Idle this long before stopping: the last tokens still have to travel from the engine thread through
# the event loop to the client (and chat replies to the database) after the engine reports idle.
DRAIN_SETTLE_SECONDS = 1.0


class GracefulServer(daphne.server.Server):
    """Remembers its listening ports so a drain can close them while connections finish."""

    def __init__(self, *args: Any, drain_timeout: float, busy: Any, **kwargs: Any) -> None:
        super().__init__(*args, signal_handlers=False, **kwargs)
        self.drain_timeout = drain_timeout
        self._busy = busy
        self._ports: list[Any] = []
        self._drain_deadline: float | None = None
        self._idle_since: float | None = None

    def listen_success(self, port: Any) -> None:
        self._ports.append(port)
        super().listen_success(port)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Python runs this between bytecodes of the reactor thread; hand the work to the reactor itself.
        reactor.callFromThread(self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        if self._drain_deadline is not None:
            logger.warning("Second signal: stopping now")
            self._stop()
            return
        self._drain_deadline = time.monotonic() + self.drain_timeout
        logger.info(
            "Received %s: no new connections; letting running generations finish (up to %.0fs)",
            signal.Signals(signum).name,
            self.drain_timeout,
        )
        for port in self._ports:
            port.stopListening()
        self._check_drained()

    def http_in_flight(self) -> int:
        """HTTP requests whose application has not finished (SSE streams included; WebSockets excluded)."""
        return sum(
            1
            for protocol, details in self.connections.items()
            if not isinstance(protocol, WebSocketProtocol)
            and details.get("application_instance") is not None
            and not details["application_instance"].done()
        )

    def _check_drained(self) -> None:
        now = time.monotonic()
        busy, streaming = self._busy(), self.http_in_flight()
        if self._drain_deadline is None or now >= self._drain_deadline:
            logger.warning("Drain timeout: cutting off %d generation(s), %d response(s)", busy, streaming)
            self._stop()
            return
        if busy or streaming:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= DRAIN_SETTLE_SECONDS:
            logger.info("Drained: no running generations or responses")
            self._stop()
            return
        reactor.callLater(DRAIN_POLL_SECONDS, self._check_drained)

    def _stop(self) -> None:
        if reactor.running:
            reactor.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.core.server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--application-close-timeout", type=float, default=10.0)
    parser.add_argument("--access-log", action="store_true", help="log every request to stdout")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

    from django.conf import settings

    from webapp.asgi import application
    from webapp.core.engine import engines_busy, shutdown_engines

    server = GracefulServer(
        application=application,
        endpoints=build_endpoint_description_strings(host=args.host, port=args.port),
        application_close_timeout=args.application_close_timeout,
        action_logger=AccessLogGenerator(sys.stdout) if args.access_log else None,
        drain_timeout=settings.MOONCAKE_DRAIN_TIMEOUT,
        busy=engines_busy,
    )
    signal.signal(signal.SIGTERM, server.on_signal)
    signal.signal(signal.SIGINT, server.on_signal)
    logger.info("Listening on http://%s:%d/", args.host, args.port)
    server.run()
    # The reactor has stopped; whatever is still generating after the drain is aborted here.
    shutdown_engines(drain_timeout=0.0)
    logger.info("Stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
