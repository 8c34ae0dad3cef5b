"""/v1/chat/completions: request preparation and both response shapes."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from inference.api import EngineClient, LogitsProcessor
from webapp.api.schemas.chat import ChatCompletionRequest
from webapp.api.services.defaults import RequestDefaults, apply_chat_defaults
from webapp.api.services.logprobs import chat_logprobs
from webapp.api.services.models import model_name
from webapp.api.services.pipeline import Job, usage_dict
from webapp.api.services.prompts import message_text, render_chat
from webapp.api.services.sampling import build_params
from webapp.api.services.tools import ToolPlan, call_dict, new_call_id, parse_calls, tool_plan
from webapp.serving.prompts import check_prompt, vocab_size
from webapp.serving.streams import Generation, merged, run_to_end, timed_out_error


def _grammar(
    engine: EngineClient, body: ChatCompletionRequest, plan: ToolPlan | None, prompt_len: int
) -> list[LogitsProcessor]:
    # Imported here: the grammar module brings torch and transformers, and loading the URL conf (every
    # manage.py command's system checks) must not pay seconds for them.
    from webapp.api.services.grammar import GrammarLogitsProcessor, json_schema_grammar, ll_tokenizer

    if plan is not None and plan.schema is not None:
        grammar = json_schema_grammar(plan.schema, param="tools")
    elif body.response_format is not None and body.response_format.type == "json_object":
        grammar = json_schema_grammar(None, param="response_format")
    elif body.response_format is not None and body.response_format.json_schema is not None:
        grammar = json_schema_grammar(body.response_format.json_schema.json_schema, param="response_format")
    else:
        return []
    tokenizer = ll_tokenizer(engine.tokenizer, set(engine.eos_token_ids))
    return [GrammarLogitsProcessor(tokenizer, grammar, prompt_len=prompt_len)]


def prepare_chat(engine: EngineClient, body: ChatCompletionRequest, *, defaults: RequestDefaults) -> Job:
    body = apply_chat_defaults(body, defaults)
    plan = tool_plan(body)
    ids = render_chat(
        engine,
        body.messages,
        tools=body.tools if plan is not None else None,
        add_generation_prompt=body.add_generation_prompt,
    )
    max_tokens = check_prompt(engine, ids, max_tokens=body.token_limit(), param="messages")
    top = body.top_logprobs or 0
    params = build_params(
        body,
        max_tokens=max_tokens,
        vocab=vocab_size(engine),
        logprobs=top if body.logprobs else None,
        logits_processors=_grammar(engine, body, plan, len(ids)),
    )
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    last_user = next((m for m in reversed(body.messages) if m.role == "user"), None)
    return Job(
        model=model_name(engine, body.model),
        prompts=[ids],
        params=params,
        stream=body.stream,
        include_usage=include_usage,
        prompt_text=message_text(last_user) if last_user else "",
        extra={"plan": plan, "logprobs": body.logprobs, "top": top},
    )


class ChatRenderer:
    def __init__(self) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _base(self, job: Job, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": job.model,
            "system_fingerprint": None,
        }

    async def complete(self, job: Job, generations: list[Generation]) -> dict[str, Any]:
        await run_to_end(generations)
        generation = generations[0]
        if generation.timed_out and not generation.produced_tokens():
            raise timed_out_error()
        plan: ToolPlan | None = job.extra["plan"]
        choices = []
        for out in generation.last.outputs if generation.last else []:
            finish: str | None = out.finish_reason or ("length" if generation.timed_out else None)
            message: dict[str, Any] = {"role": "assistant", "content": out.text}
            if plan is not None:
                content, calls = parse_calls(plan, out.text)
                message["content"] = content
                if calls:
                    message["tool_calls"] = calls
                    finish = "tool_calls" if finish == "stop" else finish
            logprobs = None
            if job.extra["logprobs"]:
                logprobs = {"content": chat_logprobs(out.logprobs or [], job.extra["top"])}
            choices.append(
                {"index": out.index, "message": message, "logprobs": logprobs, "finish_reason": finish}
            )
        return dict(self._base(job, "chat.completion"), choices=choices, usage=usage_dict(generations))

    def _chunk(
        self, job: Job, index: int, delta: dict[str, Any], *, logprobs: Any = None, finish: str | None = None
    ) -> dict[str, Any]:
        chunk = dict(
            self._base(job, "chat.completion.chunk"),
            choices=[{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        )
        if job.include_usage:
            chunk["usage"] = None
        return chunk

    async def events(self, job: Job, generations: list[Generation]) -> AsyncIterator[dict[str, Any]]:
        plan: ToolPlan | None = job.extra["plan"]
        # Named calls stream their arguments as they come; other tool modes need the whole text to parse.
        buffered = plan is not None and plan.mode != "named"
        call_id = new_call_id()
        sent_logprobs: dict[int, int] = {}
        finished: set[int] = set()
        async for _, ro in merged(generations):
            for out in ro.outputs:
                i = out.index
                if i in finished:
                    continue
                if i not in sent_logprobs:
                    sent_logprobs[i] = 0
                    if plan is not None and plan.mode == "named":
                        first = call_dict(plan.named or "", "", call_id)
                        yield self._chunk(
                            job,
                            i,
                            {"role": "assistant", "content": None, "tool_calls": [dict(first, index=0)]},
                        )
                    else:
                        yield self._chunk(job, i, {"role": "assistant", "content": ""})
                new_lp = (out.logprobs or [])[sent_logprobs[i] :] if job.extra["logprobs"] else []
                sent_logprobs[i] += len(new_lp)
                if not buffered and (out.delta_text or new_lp):
                    delta: dict[str, Any] = (
                        {"tool_calls": [{"index": 0, "function": {"arguments": out.delta_text}}]}
                        if plan is not None
                        else {"content": out.delta_text}
                    )
                    lp = {"content": chat_logprobs(new_lp, job.extra["top"])} if new_lp else None
                    yield self._chunk(job, i, delta, logprobs=lp)
                if out.finish_reason is not None:
                    finished.add(i)
                    for event in self._finish_events(job, plan, buffered, i, out.text, out.finish_reason):
                        yield event
        generation = generations[0]
        if generation.timed_out:
            if not generation.produced_tokens():
                raise timed_out_error()
            for out in generation.last.outputs if generation.last else []:
                if out.index not in finished:
                    for event in self._finish_events(job, plan, buffered, out.index, out.text, "length"):
                        yield event
        if job.include_usage:
            yield dict(self._base(job, "chat.completion.chunk"), choices=[], usage=usage_dict(generations))

    def _finish_events(
        self, job: Job, plan: ToolPlan | None, buffered: bool, index: int, text: str, reason: str
    ) -> list[dict[str, Any]]:
        if plan is None:
            return [self._chunk(job, index, {}, finish=reason)]
        if not buffered:
            return [self._chunk(job, index, {}, finish="tool_calls" if reason == "stop" else reason)]
        content, calls = parse_calls(plan, text)
        events = []
        if content:
            events.append(self._chunk(job, index, {"content": content}))
        if calls:
            events.append(
                self._chunk(job, index, {"tool_calls": [dict(c, index=k) for k, c in enumerate(calls)]})
            )
            reason = "tool_calls" if reason == "stop" else reason
        events.append(self._chunk(job, index, {}, finish=reason))
        return events
