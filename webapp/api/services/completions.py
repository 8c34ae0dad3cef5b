"""/v1/completions: request preparation and both response shapes (echo and legacy logprobs included)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from inference.api import CompletionOutput, EngineClient, RequestOutput
from webapp.api.schemas.completions import CompletionRequest, prompt_count
from webapp.api.services.defaults import RequestDefaults, apply_sampling_defaults
from webapp.api.services.logprobs import (
    LegacyEntry,
    completion_logprobs,
    legacy_entries,
    legacy_prompt_entries,
)
from webapp.api.services.models import model_name
from webapp.api.services.pipeline import Job, usage_dict
from webapp.api.services.sampling import build_params
from webapp.core.errors import InvalidRequest
from webapp.serving.prompts import check_prompt, encode_text, vocab_size
from webapp.serving.streams import Generation, merged, run_to_end, timed_out_error


def _prompt_list(engine: EngineClient, prompt: Any) -> tuple[list[list[int]], list[str | None]]:
    """Token ids per prompt, plus the original text where there was one (echo returns it verbatim)."""
    if isinstance(prompt, str):
        return [encode_text(engine, prompt)], [prompt]
    if not prompt:
        raise InvalidRequest("The prompt is empty.", param="prompt")
    if all(isinstance(p, str) for p in prompt):
        return [encode_text(engine, p) for p in prompt], list(prompt)
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)], [None]
    return [list(p) for p in prompt], [None] * len(prompt)


def check_fits_queue(engine: EngineClient, body: CompletionRequest) -> None:
    """Each prompt is one engine request: more than the queue can ever hold is a 400, never a 503 to retry."""
    capacity, count = engine.max_queue_len, prompt_count(body.prompt)
    if count > capacity:
        raise InvalidRequest(
            f"This request has {count} prompts, but this server queues at most {capacity} requests, so "
            f"it could never be admitted: send at most {capacity} prompts per request.",
            param="prompt",
        )


def prepare_completion(engine: EngineClient, body: CompletionRequest, *, defaults: RequestDefaults) -> Job:
    check_fits_queue(engine, body)  # before any tokenizing: the answer does not depend on it
    body = apply_sampling_defaults(body, defaults)
    prompts, texts = _prompt_list(engine, body.prompt)
    max_tokens = body.token_limit()
    for ids in prompts:
        check_prompt(engine, ids, max_tokens=max_tokens, param="prompt")
    top = body.logprobs
    params = build_params(
        body,
        max_tokens=max_tokens,
        vocab=vocab_size(engine),
        logprobs=top,
        prompt_logprobs=top if (body.echo and top is not None) else None,
    )
    echo_texts = [
        t if t is not None else engine.tokenizer.decode(ids) for t, ids in zip(texts, prompts, strict=True)
    ]
    first_tokens = [engine.tokenizer.decode(ids[:1]) for ids in prompts]
    return Job(
        model=model_name(engine, body.model),
        prompts=prompts,
        params=params,
        stream=body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        prompt_text="\n".join(t for t in texts if t) if texts else "",
        extra={
            "echo": body.echo,
            "top": top,
            "n": body.n,
            "echo_texts": echo_texts,
            "first_tokens": first_tokens,
        },
    )


class CompletionRenderer:
    def __init__(self) -> None:
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _base(self, job: Job) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": job.model,
            "system_fingerprint": None,
        }

    def _prompt_entries(self, job: Job, p: int, ro: RequestOutput) -> list[LegacyEntry]:
        return legacy_prompt_entries(ro.prompt_logprobs or [], job.extra["first_tokens"][p], job.extra["top"])

    async def complete(self, job: Job, generations: list[Generation]) -> dict[str, Any]:
        await run_to_end(generations)
        if any(g.timed_out and not g.produced_tokens() for g in generations):
            raise timed_out_error()
        choices = []
        for p, generation in enumerate(generations):
            ro = generation.last
            for out in ro.outputs if ro else []:
                choices.append(self._choice(job, p, generation, ro, out))
        choices.sort(key=lambda c: c["index"])
        return dict(self._base(job), choices=choices, usage=usage_dict(generations))

    def _choice(self, job: Job, p: int, g: Generation, ro: Any, out: CompletionOutput) -> dict[str, Any]:
        echo = job.extra["echo"]
        prefix = job.extra["echo_texts"][p] if echo else ""
        logprobs = None
        if job.extra["top"] is not None:
            entries = self._prompt_entries(job, p, ro) if echo else []
            entries += legacy_entries(out.logprobs or [], job.extra["top"])
            logprobs = completion_logprobs(entries, text_offset=0)
        return {
            "index": p * job.extra["n"] + out.index,
            "text": prefix + out.text,
            "logprobs": logprobs,
            "finish_reason": out.finish_reason or ("length" if g.timed_out else None),
        }

    def _chunk(self, job: Job, index: int, text: str, logprobs: Any, finish: str | None) -> dict[str, Any]:
        chunk = dict(
            self._base(job),
            choices=[{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}],
        )
        if job.include_usage:
            chunk["usage"] = None
        return chunk

    async def events(self, job: Job, generations: list[Generation]) -> AsyncIterator[dict[str, Any]]:
        top = job.extra["top"]
        sent: dict[int, int] = {}
        offsets: dict[int, int] = {}
        finished: set[int] = set()
        async for p, ro in merged(generations):
            for out in ro.outputs:
                index = p * job.extra["n"] + out.index
                if index in finished:
                    continue
                text, entries = out.delta_text, []
                if index not in sent:
                    sent[index], offsets[index] = 0, 0
                    if job.extra["echo"]:
                        text = job.extra["echo_texts"][p] + text
                        if top is not None:
                            entries = self._prompt_entries(job, p, ro)
                if top is not None:
                    new = (out.logprobs or [])[sent[index] :]
                    sent[index] += len(new)
                    entries += legacy_entries(new, top)
                logprobs = (
                    completion_logprobs(entries, text_offset=offsets[index]) if top is not None else None
                )
                offsets[index] += sum(len(e[0]) for e in entries)
                if text or entries or out.finish_reason:
                    yield self._chunk(job, index, text, logprobs, out.finish_reason)
                if out.finish_reason is not None:
                    finished.add(index)
        for p, generation in enumerate(generations):
            if not generation.timed_out:
                continue
            if not generation.produced_tokens():
                raise timed_out_error()
            for out in generation.last.outputs if generation.last else []:
                index = p * job.extra["n"] + out.index
                if index not in finished:
                    yield self._chunk(job, index, "", None, "length")
        if job.include_usage:
            yield dict(self._base(job), choices=[], usage=usage_dict(generations))
