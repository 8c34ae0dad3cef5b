"""A models list in mooncake.yaml, served for real (tests/webapp/live_models.py): the bundled model in
float32 and bfloat16 in one Daphne, each answering by id through the API, and both in the console as
"from mooncake.yaml"."""

from __future__ import annotations

import json

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.live_models import console_models_page, console_row, post

pytestmark = pytest.mark.slow

PROMPT = [{"role": "user", "content": "Name three colours."}]


def _chat(server: LiveDaphne, model: str | None) -> tuple[str, str]:
    body: dict[str, object] = {"messages": PROMPT, "temperature": 0, "max_tokens": 24}
    if model is not None:
        body["model"] = model
    reply = post(server, "/v1/chat/completions", body)
    return str(reply["model"]), str(reply["choices"][0]["message"]["content"])


def test_a_models_list_serves_both_by_id_and_shows_both_in_the_console(
    models_list_server: LiveDaphne,
) -> None:
    server = models_list_server
    listed = {m["id"] for m in json.loads(server.get("/v1/models")[1])["data"]}
    assert {"smol-fp32", "smol-bf16"} <= listed

    model, fp32 = _chat(server, "smol-fp32")
    # Greedy fp32 in a list of five engines is the reply of transformers' own implementation of the model
    # (the correctness oracle), so nothing the other models do reaches this one.
    assert model == "smol-fp32" and fp32 and fp32 == _chat(server, "smol-hf")[1]
    model, bf16 = _chat(server, "smol-bf16")
    assert model == "smol-bf16" and bf16
    assert _chat(server, None)[0] == "smol-bf16"  # no model: the one that says default: true

    page = console_models_page(server)
    for name in ("smol-fp32", "smol-bf16"):
        assert "from mooncake.yaml" in console_row(page, name)
