"""`mooncake check` for an `openai` engine: does its upstream answer, accept our key and list the model?

One GET {base_url}/models with the key the server would send, as the engine's own health poll does, under
a short timeout so that check never hangs on a server that accepts connections and stays silent.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from inference.api import EngineConfig

PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class Probe:
    line: str  # what check shows under the model's settings
    problem: str | None = None  # a PROBLEM line, naming the fix


def probe_upstream(config: EngineConfig, name: str) -> Probe:
    remote = config.remote()
    base = (remote.base_url or "").rstrip("/")
    url = f"{base}/models"
    headers = {"Authorization": f"Bearer {remote.api_key}"} if remote.api_key else {}
    try:
        response = httpx.get(url, headers=headers, timeout=PROBE_TIMEOUT_S)
    except httpx.TimeoutException:
        why = f"GET {url} had no answer within {PROBE_TIMEOUT_S:.0f} s"
        return _problem(name, f"{why}; check that the server at engine.base_url is up and not overloaded")
    except httpx.HTTPError as exc:
        why = f"GET {url} failed ({type(exc).__name__}: {exc})"
        return _problem(name, f"{why}; start the upstream server, or fix engine.base_url (up to /v1)")
    if response.status_code in (401, 403):
        refused = "refused our API key" if remote.api_key else "wants an API key and none is set"
        fix = f"set engine.api_key_env to the variable holding a key {base} accepts"
        return _problem(name, f"GET {url} answered {response.status_code}: the upstream {refused}; {fix}")
    if response.status_code != 200:
        return _problem(
            name,
            f"GET {url} answered {response.status_code}; engine.base_url must be the server's OpenAI API root"
            " (usually ending in /v1)",
        )
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError):
        data = None
    if not isinstance(data, list):
        return _problem(name, f"GET {url} did not answer an OpenAI model list; is engine.base_url right?")
    ids = [str(card["id"]) for card in data if isinstance(card, dict) and card.get("id")]
    wanted = remote.upstream_model
    if wanted is not None and wanted not in ids:
        listed = ", ".join(ids) or "none"
        missing = f"the upstream does not list engine.upstream_model {wanted!r} (it lists: {listed})"
        return _problem(name, f"{missing}; set engine.upstream_model to one of them")
    if not ids:
        return _problem(name, f"GET {url} lists no models; load one on the upstream server")
    model = wanted or ids[0]
    return Probe(f"answers, key accepted, serves {model} ({url})")


def _problem(name: str, text: str) -> Probe:
    return Probe("not usable (see PROBLEM)", f"upstream of {name}: {text}")
