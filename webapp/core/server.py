"""Daphne with a graceful stop: `python -m webapp.core.server --host H --port P`.

Daphne on its own cancels every running application on SIGTERM. Here the first SIGTERM/SIGINT closes the
listening sockets (no new connections), waits until the engines have no running or waiting requests (at
most MOONCAKE_DRAIN_TIMEOUT seconds), then stops the reactor and unloads the models. A second signal stops
at once.
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
from twisted.internet import reactor as _reactor

# Twisted's reactor is typed as a bag of interfaces; treat it as the dynamic object it is.
reactor: Any = _reactor

logger = logging.getLogger("mooncake.server")

DRAIN_POLL_SECONDS = 0.25


class GracefulServer(daphne.server.Server):
    """Remembers its listening ports so a drain can close them while connections finish."""

    def __init__(self, *args: Any, drain_timeout: float, busy: Any, **kwargs: Any) -> None:
        super().__init__(*args, signal_handlers=False, **kwargs)
        self.drain_timeout = drain_timeout
        self._busy = busy
        self._ports: list[Any] = []
        self._drain_deadline: float | None = None

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

    def _check_drained(self) -> None:
        busy = self._busy()
        if busy == 0 or self._drain_deadline is None or time.monotonic() >= self._drain_deadline:
            if busy:
                logger.warning("Drain timeout: %d request(s) still running are cut off", busy)
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
