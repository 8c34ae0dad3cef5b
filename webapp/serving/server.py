"""Daphne with a graceful stop: `python -m webapp.serving.server --host H --port P`.

Daphne on its own cancels every running application on SIGTERM. Here the first SIGTERM/SIGINT closes the
listening sockets (no new connections), waits until the engines have no running or waiting requests and
no HTTP response is still streaming (at most the drain timeout, read when the signal comes: the console's
override, else MOONCAKE_DRAIN_TIMEOUT / server.drain_timeout), then stops the reactor and
unloads the models. A second signal stops at once. Open WebSockets do not hold the stop up: chat
generations run in the engine, which the drain waits for.

At the drain deadline the event loop is still running: SSE streams are cut with an error event and
[DONE], the engines abort the rest (non-streamed answers end with finish_reason "abort"), and the
reactor stops once those responses went out (at most CUT_GRACE_SECONDS). After the reactor, every task
left on the asyncio loop is cancelled and run to its end before the interpreter exits: a coroutine still
suspended at exit is finalized during module teardown, and CPython 3.11 crashes there (SIGSEGV in the
repr of an asyncio Future whose C module is already gone). Likewise no thread may be inside torch then
(a daemon thread is killed as it retakes the GIL, and unwinding C++ frames aborts): a model still loading
gets LOAD_WAIT_SECONDS to finish and be unloaded, else the process exits 0 without interpreter teardown.
"""

from __future__ import annotations

# daphne.server installs the asyncio Twisted reactor; it must be imported before anything touches Twisted.
import daphne.server  # isort:skip

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from daphne.access import AccessLogGenerator
from daphne.endpoints import build_endpoint_description_strings
from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import reactor as _reactor
from twisted.web import http

# Twisted's reactor is typed as a bag of interfaces; treat it as the dynamic object it is.
reactor: Any = _reactor

logger = logging.getLogger("mooncake.server")

DRAIN_POLL_SECONDS = 0.25
# Idle this long before stopping: the last tokens still have to travel from the engine thread through
# the event loop to the client (and chat replies to the database) after the engine reports idle.
DRAIN_SETTLE_SECONDS = 1.0
# After the cut, how long the error events and aborted answers get to reach their clients.
CUT_GRACE_SECONDS = 5.0
# How long tasks left on the loop after the reactor get to finish their cancellation.
LOOP_FINISH_SECONDS = 5.0
# How long a stop waits for the console's drain timeout to be read before using the configured one.
DRAIN_READ_SECONDS = 5.0
# How long a stop waits for a model that is still loading (a loader cannot be interrupted).
LOAD_WAIT_SECONDS = 5.0


class GracefulServer(daphne.server.Server):
    """Remembers its listening ports so a drain can close them while connections finish."""

    def __init__(
        self,
        *args: Any,
        drain_timeout: Callable[[], float],
        busy: Callable[[], int],
        cut_streams: Callable[[], int],
        abort_engines: Callable[[], object],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, signal_handlers=False, **kwargs)
        self.drain_timeout = drain_timeout
        self._busy = busy
        self._cut_streams = cut_streams
        self._abort_engines = abort_engines
        self._ports: list[Any] = []
        self._drain_deadline: float | None = None
        self._idle_since: float | None = None
        self._cut_deadline: float | None = None
        self.aborter: threading.Thread | None = None

    def listen_success(self, port: Any) -> None:
        self._ports.append(port)
        super().listen_success(port)

    def protocol_connected(self, protocol: Any) -> None:
        if isinstance(protocol, http.Request):
            # Django parses bodies itself. Twisted's own form parsing answers a multipart body it cannot
            # read (no boundary) with an empty 400 before Django, and the API's JSON errors, ever see it.
            protocol._parsePOSTFormSubmission = False
            # Twisted reads a whole body before the application starts: refuse one over the limit first.
            # (Imported here: it reads the app's settings, and this module loads before Django is set up.)
            from webapp.serving.body_guard import guard_request_body

            guard_request_body(protocol)
        super().protocol_connected(protocol)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Python runs this between bytecodes of the reactor thread; hand the work to the reactor itself.
        reactor.callFromThread(self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        if self._drain_deadline is not None:
            logger.warning("Second signal: stopping now")
            self._stop()
            return
        timeout = self.drain_timeout()
        self._drain_deadline = time.monotonic() + timeout
        logger.info(
            "Received %s: no new connections; letting running generations finish (up to %.0fs)",
            signal.Signals(signum).name,
            timeout,
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
            self._cut_off()
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

    def _cut_off(self) -> None:
        """End running streams with an error event and abort the engines, with the loop still running."""
        self._cut_streams()
        # Unloading joins the engine thread: off the loop, which must keep delivering the final outputs.
        self.aborter = threading.Thread(target=self._abort_engines, name="mooncake-abort")
        self.aborter.start()
        self._cut_deadline = time.monotonic() + CUT_GRACE_SECONDS
        self._check_cut()

    def _check_cut(self) -> None:
        assert self._cut_deadline is not None
        aborting = self.aborter is not None and self.aborter.is_alive()
        if (not aborting and not self.http_in_flight()) or time.monotonic() >= self._cut_deadline:
            self._stop()
            return
        reactor.callLater(DRAIN_POLL_SECONDS / 5, self._check_cut)

    def _stop(self) -> None:
        if reactor.running:
            reactor.stop()


def finish_loop_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the stopped reactor left on the loop and run it to the end, then close the loop.

    Daphne cancels its application instances, but not the tasks they started (Django runs each request
    in a task of its own); whatever is still suspended at interpreter exit would be finalized in module
    teardown, where CPython 3.11 crashes.
    """
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        logger.info("Cancelling %d task(s) left on the event loop", len(tasks))
        _, stuck = loop.run_until_complete(asyncio.wait(tasks, timeout=LOOP_FINISH_SECONDS))
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: an error in a cancelled request is no news at exit
        if stuck:
            logger.warning("%d task(s) ignored cancellation: %s", len(stuck), stuck)
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def read_drain_timeout() -> float:
    """engine_settings.drain_timeout, read on a thread of its own: Django refuses database queries on a
    thread running an event loop, as the reactor's does. The configured value if the read fails."""
    from django.conf import settings
    from django.db import connections

    from webapp.core.engine_settings import drain_timeout

    result = [float(settings.MOONCAKE_DRAIN_TIMEOUT)]

    def read() -> None:
        try:
            result[0] = drain_timeout()
        except Exception:
            logger.exception("Reading the console's drain timeout failed; using the configured one")
        finally:
            connections.close_all()

    reader = threading.Thread(target=read, name="mooncake-drain-timeout")
    reader.start()
    reader.join(timeout=DRAIN_READ_SECONDS)
    return result[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.serving.server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--application-close-timeout", type=float, default=10.0)
    parser.add_argument("--access-log", action="store_true", help="log every request to stdout")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

    from webapp.asgi import application
    from webapp.serving.runtime import get_runtime
    from webapp.serving.stream_cuts import cut_all_streams

    runtime = get_runtime()
    server = GracefulServer(
        application=application,
        endpoints=build_endpoint_description_strings(host=args.host, port=args.port),
        application_close_timeout=args.application_close_timeout,
        action_logger=AccessLogGenerator(sys.stdout) if args.access_log else None,
        drain_timeout=read_drain_timeout,
        busy=runtime.busy,
        cut_streams=cut_all_streams,
        abort_engines=runtime.stop,
    )
    signal.signal(signal.SIGTERM, server.on_signal)
    signal.signal(signal.SIGINT, server.on_signal)
    logger.info("Listening on http://%s:%d/", args.host, args.port)
    server.run()
    # The reactor has stopped (a second signal skips the cut): whatever still generates is aborted here,
    # and the engine threads are joined while the interpreter is whole.
    if server.aborter is not None:
        server.aborter.join()
    loading = runtime.stop(drain_timeout=0.0, load_wait=LOAD_WAIT_SECONDS)
    finish_loop_tasks(reactor._asyncioEventloop)
    stuck = loading + [t.name for t in threading.enumerate() if t.name.startswith("mooncake-engine-")]
    if stuck:
        # A daemon thread inside torch when the interpreter finalizes is killed as it retakes the GIL,
        # and unwinding its C++ frames aborts the process: skip the teardown instead.
        logger.warning("Stopped; still busy in native code: %s (exiting without teardown)", stuck)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    logger.info("Stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
