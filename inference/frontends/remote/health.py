"""Whether an `openai` engine's upstream answers, and what it serves: GET /models, polled on a thread.

health() must answer at once (the /health view and the console call it), so it reports the last poll's
verdict, corrected as soon as a request meets the upstream up or down. The same poll learns the model's
upstream name (the configured one, else the first the upstream lists) and its context length where the
card tells it (vLLM's and Mooncake's `max_model_len`), so neither waits for the first request.

An upstream that refuses our key reads "upstream authentication failed: ..." rather than unavailable, since
only a fixed key helps; the polling goes on, so the model serves again once the upstream accepts it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from inference.errors import EngineError, UpstreamUnavailableError
from inference.frontends.remote.upstream import Upstream, UpstreamAuthError, auth_failure
from inference.status import EngineHealth

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 5.0
PROBE_TIMEOUT_S = 5.0


class UpstreamHealth:
    def __init__(self, upstream: Upstream, *, wanted: str | None, interval: float = POLL_INTERVAL_S) -> None:
        self.upstream = upstream
        self.wanted = wanted
        self.interval = interval
        self.known_name: str | None = wanted
        self.max_model_len: int | None = None
        self._error: str | None = "upstream unavailable: not checked yet"  # health's words; None: up
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Probe once now (so a load knows where it stands), then keep polling in the background."""
        self.refresh()
        self._thread = threading.Thread(
            target=self._run, name=f"mooncake-upstream-{self.upstream.host}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=PROBE_TIMEOUT_S + 1)

    def health(self) -> EngineHealth:
        error = self._error
        return EngineHealth("ready") if error is None else EngineHealth("dead", error)

    def mark_up(self) -> None:
        self._error = None

    def mark_down(self, error: str | EngineError) -> None:
        """Unavailable for `error`; a refused key is told as such (logged once per change of kind)."""
        if isinstance(error, UpstreamAuthError):
            text = auth_failure(self.upstream, error)
        else:
            text = f"upstream unavailable: {error}"
        previous = self._error
        if previous is None or previous.split(":", 1)[0] != text.split(":", 1)[0]:
            logger.warning("Upstream %s: %s", self.upstream.host, text)
        self._error = text

    def refresh(self) -> None:
        """One GET /models: the verdict, the model's name and context length."""
        try:
            cards = self.upstream.models(timeout=PROBE_TIMEOUT_S)
        except EngineError as exc:
            self.mark_down(exc)
            return
        self._learn(cards)
        if self._error is not None:
            logger.info("Upstream %s answers (model %s)", self.upstream.host, self.known_name)
        self.mark_up()

    def model_name(self) -> str:
        """The upstream's name for the model; blocking when it is not known yet (the upstream was down)."""
        if self.known_name is None:
            cards = self.upstream.models(timeout=PROBE_TIMEOUT_S)
            self._learn(cards)
            if self.known_name is None:
                raise UpstreamUnavailableError(f"{self.upstream.host} lists no models")
        return self.known_name

    def _learn(self, cards: list[dict[str, Any]]) -> None:
        ids = [str(card["id"]) for card in cards if card.get("id")]
        if self.wanted is None and ids:
            self.known_name = ids[0]
        elif self.wanted is not None and ids and self.wanted not in ids:
            logger.warning(
                "Upstream %s does not list model %r (it lists %s)", self.upstream.host, self.wanted, ids
            )
        card = next((c for c in cards if str(c.get("id")) == self.known_name), None)
        length = card.get("max_model_len") if card is not None else None
        if isinstance(length, int) and length > 0:
            self.max_model_len = length

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception:  # a bug here must not end the polling and freeze health at its last value
                logger.exception("Polling upstream %s failed", self.upstream.host)
