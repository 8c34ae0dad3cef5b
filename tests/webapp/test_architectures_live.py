"""The architectures beyond Llama and Qwen served for real (the models-list server of
tests/webapp/live_models.py: tiny random Qwen3-MoE, Mistral, Gemma 2 and Phi-3 checkpoints beside the bundled
model): the API answers greedily as transformers does in fp32, with logprobs, and the sampling features
(seeds, logit_bias, a JSON-schema grammar) act on each as on the dense Llama models."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from tests.live_server import LiveDaphne
from tests.webapp.live_models import TINY_MODELS, post

pytestmark = pytest.mark.slow

PROMPT = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(params=sorted(TINY_MODELS))
def model(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def chat(server: LiveDaphne, model: str, **body: Any) -> dict[str, Any]:
    return post(server, "/v1/chat/completions", {"model": model, "messages": PROMPT, **body})


@torch.inference_mode()
def test_greedy_replies_and_logprobs_equal_transformers(models_list_server: LiveDaphne, model: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = models_list_server.data_dir / "models" / model
    reply = chat(models_list_server, model, temperature=0, max_tokens=16, logprobs=True)
    choice = reply["choices"][0]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_dict=False)
    ids = torch.tensor([list(prompt)])
    out = reference.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=16,
        output_logits=True,
        return_dict_in_generate=True,
    )
    tokens = out.sequences[0, ids.shape[1] :].tolist()
    if tokens and tokens[-1] == tokenizer.eos_token_id:
        tokens = tokens[:-1]  # the stop token is not part of the reply
    assert choice["message"]["content"] == tokenizer.decode(tokens, skip_special_tokens=True)
    theirs = [
        torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, tokens, strict=False)
    ]
    ours = [entry["logprob"] for entry in choice["logprobs"]["content"]][: len(theirs)]
    assert len(ours) == len(theirs) and max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) < 1e-3


def test_seeds_logit_bias_and_a_json_schema_act_on_it(models_list_server: LiveDaphne, model: str) -> None:
    from transformers import AutoTokenizer

    server = models_list_server
    sampled = [chat(server, model, temperature=1.0, seed=seed, max_tokens=12) for seed in (7, 7, 8)]
    texts = [r["choices"][0]["message"]["content"] for r in sampled]
    assert texts[0] == texts[1] and texts[0] != texts[2]

    tokenizer = AutoTokenizer.from_pretrained(server.data_dir / "models" / model)
    (moon,) = tokenizer.encode(" moon")
    forced = chat(server, model, temperature=0, max_tokens=4, logit_bias={str(moon): 100})
    assert forced["choices"][0]["message"]["content"] == " moon" * 4

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = chat(
        server,
        model,
        temperature=0,
        max_tokens=48,
        response_format={"type": "json_schema", "json_schema": {"name": "flag", "schema": schema}},
    )
    parsed = json.loads(answer["choices"][0]["message"]["content"])
    assert set(parsed) == {"ok"} and isinstance(parsed["ok"], bool)
