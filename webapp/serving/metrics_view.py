"""/metrics behind a bearer token (MOONCAKE_METRICS_TOKEN), for servers without a private port.

Set, a scraper must send `Authorization: Bearer <token>` (Prometheus: `authorization: {credentials: <token>}`
in the scrape config) and gets every series. Production settings require it
(MOONCAKE_METRICS_TOKEN_REQUIRED): there, without a token, /metrics is refused. Elsewhere (one machine,
tests) it stays open, less every series labelled with a restricted model, whose name is for the people who
may use it only (webapp.serving.model_access). Those series are left out rather than relabelled: two
restricted models under one stand-in label would make duplicate series, which Prometheus rejects.
"""

from __future__ import annotations

import copy
import hmac
import os
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.metrics_core import Metric

from webapp.serving.model_access import restrictions

# The labels that carry a model's registry name: mooncake:* use vLLM's, the mooncake_* guide names "model".
MODEL_LABELS = ("model_name", "model")
NO_TOKEN = (
    "/metrics is off: these settings require MOONCAKE_METRICS_TOKEN. Set it, and give the scraper the same "
    "token (Authorization: Bearer <token>).\n"
)


def _authorized(request: HttpRequest, token: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # Constant time: the comparison must not tell a guesser how much of the token was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class _Without:
    """A registry's metrics, less every sample labelled with one of the `hidden` models."""

    def __init__(self, registry: CollectorRegistry, hidden: frozenset[str]) -> None:
        self._registry = registry
        self._hidden = hidden

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            kept = [s for s in family.samples if not self._hidden.intersection(_models(s.labels))]
            if len(kept) != len(family.samples):
                family = copy.copy(family)  # the registry's own object stays as it was
                family.samples = kept
            yield family


def _models(labels: dict[str, str]) -> set[str]:
    return {labels[label] for label in MODEL_LABELS if label in labels}


def _registry() -> CollectorRegistry:
    # As django_prometheus's view: in multiprocess mode, a registry per scrape over every process's files.
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def _export(hidden: frozenset[str]) -> HttpResponse:
    registry = _registry()
    if hidden:
        # No describe(): registering must not collect (the scrape below does, once).
        filtered = CollectorRegistry(auto_describe=False)
        filtered.register(_Without(registry, hidden))
        registry = filtered
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token: str = getattr(settings, "MOONCAKE_METRICS_TOKEN", "")
    if token:
        if _authorized(request, token):
            return _export(frozenset())
        response = HttpResponse("Unauthorized.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if getattr(settings, "MOONCAKE_METRICS_TOKEN_REQUIRED", False):
        return HttpResponse(NO_TOKEN, status=403, content_type="text/plain")
    return _export(frozenset(restrictions()))
