"""Serving benchmark against any OpenAI-compatible server, in the spirit of `vllm bench serve`.

    python -m bench.serve --base-url http://127.0.0.1:8000 --num-prompts 32 --max-concurrency 16 \
        --max-tokens 128 --temperature 0 [--dataset fixed|random|shared-prefix|edit] [--request-rate 4] \
        [--spec-metrics] [--json out.json]

Every request streams; TTFT is the time to the first chunk that carries content, ITL the gaps between
content chunks, TPOT (e2e - TTFT) / (output tokens - 1). Token counts come from the server's usage chunk
(`stream_options.include_usage`) when it sends one; otherwise from `--tokenizer` (a local HF directory),
else one token per content chunk. Both sides of a comparison should be counted the same way: pass the
same `--tokenizer` and compare `token_source` in the JSON.

`edit` prompts ask for a given text back, corrected or with a variable renamed, so most of each answer
repeats the prompt (where n-gram speculation pays off). `--spec-metrics` reads the server's Prometheus
counters `*spec_decode_num_draft_tokens_total` and `*spec_decode_num_accepted_tokens_total` (any prefix:
`mooncake:`, `llamacpp:`, `vllm:`) from GET /metrics before and after the load and reports the acceptance
rate of the drafts made during it; without those counters it reports none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.prompts import edit_request
from bench.prompts import question as chat_question

# Common words that are one token each in most BPE vocabularies, so word counts approximate token counts
# when no tokenizer is at hand.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her they this have had are not but be "
    "or one all were we when there can an which their said if do will each about how up out them then "
    "she many some so these would other into has more two like him see time could no make than first "
    "been its who now people my made over did down only way find use may water long little very after "
    "words called just where most know get through back much before go good new write our used me man "
    "too any day same right look think also around another came come work three word must because does "
    "part even place well such here take why things help put years different away again off went old "
    "number great tell men say small every found still between name should home big give air line set "
    "own under read last never us left end along while might next sound below saw something thought both "
    "few those always looked show large often together asked house world going want school important "
    "until form food keep children feet land side without boy once animals life enough took sometimes "
    "four head above kind began almost live page got earth need far hand high year mother light parts "
    "country father let night following picture being study second eyes soon times story boys since "
    "white days ever paper hard near sentence better best across during today others however sure means"
)
WORDS = _WORD_TEXT.split()
SYSTEM_TOPIC = (
    "You are Mooncake, a careful assistant for a public library. Answer questions about books, opening "
    "hours, membership, events and research help. Be brief, be kind, cite the catalogue when you can, and "
    "never invent a book that is not in the catalogue. "
)


# ---- prompts ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Prompt:
    messages: list[dict[str, str]]
    max_tokens: int
    prompt_tokens: int | None = None  # known when a tokenizer built or measured it


class Tokenizer:
    """A thin wrapper over a local Hugging Face tokenizer (optional: only imported when asked for)."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self._tok: Any = AutoTokenizer.from_pretrained(path)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False))

    def chat_len(self, messages: list[dict[str, str]]) -> int:
        ids = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    def trim(self, text: str, tokens: int) -> str:
        ids = self._tok.encode(text, add_special_tokens=False)[:tokens]
        return str(self._tok.decode(ids))


def random_words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(count, 1)))


def sized_text(rng: random.Random, tokens: int, tokenizer: Tokenizer | None) -> str:
    if tokenizer is None:
        return random_words(rng, tokens)
    # Words tokenize to about one token each; draw extra and cut to the exact count.
    return tokenizer.trim(random_words(rng, tokens + tokens // 2 + 8), tokens)


def shared_system_prompt(tokens: int, tokenizer: Tokenizer | None) -> str:
    rng = random.Random(4242)  # the same prefix on every run and for every server
    text = SYSTEM_TOPIC + "Catalogue notes: " + random_words(rng, tokens)
    if tokenizer is None:
        words = text.split()[:tokens]
        return " ".join(words)
    return tokenizer.trim(text, tokens)


def build_prompts(args: argparse.Namespace, tokenizer: Tokenizer | None) -> list[Prompt]:
    rng = random.Random(args.seed)
    prompts: list[Prompt] = []
    system = (
        shared_system_prompt(args.shared_prefix_len, tokenizer) if args.dataset == "shared-prefix" else ""
    )
    for i in range(args.num_prompts):
        question = chat_question(i)
        max_tokens = args.max_tokens
        if args.dataset == "fixed":
            messages = [{"role": "user", "content": question}]
        elif args.dataset == "edit":
            messages = [{"role": "user", "content": edit_request(i)}]
        elif args.dataset == "shared-prefix":
            # A distinct question after the shared prefix, so only the system prompt can be reused.
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Request {i}: {question}"},
            ]
        else:
            low = max(1, int(args.random_input_len * (1 - args.random_range_ratio)))
            high = max(low, int(args.random_input_len * (1 + args.random_range_ratio)))
            messages = [{"role": "user", "content": sized_text(rng, rng.randint(low, high), tokenizer)}]
            out_low = max(1, int(args.max_tokens * (1 - args.random_range_ratio)))
            out_high = max(out_low, int(args.max_tokens * (1 + args.random_range_ratio)))
            max_tokens = rng.randint(out_low, out_high)
        prompt_tokens = tokenizer.chat_len(messages) if tokenizer is not None else None
        prompts.append(Prompt(messages=messages, max_tokens=max_tokens, prompt_tokens=prompt_tokens))
    return prompts


# ---- one request --------------------------------------------------------------------------------------


@dataclass(slots=True)
class RequestResult:
    ok: bool
    ttft: float = 0.0
    e2e: float = 0.0
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    token_source: str = "chunks"
    text: str = ""
    error: str = ""
    sent: bool = False
    cut: bool = False  # still running at --time-limit; its streamed tokens count toward throughput
    parts: list[str] = field(default_factory=list)


def chunk_content(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")


def request_body(args: argparse.Namespace, prompt: Prompt, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": prompt.max_tokens,
        "temperature": args.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.endpoint == "completions":
        body["prompt"] = "\n\n".join(m["content"] for m in prompt.messages)
    else:
        body["messages"] = prompt.messages
    if args.ignore_eos:
        body["ignore_eos"] = True  # a vLLM extension; servers that do not know it may ignore or refuse it
    if args.top_p is not None:
        body["top_p"] = args.top_p
    return body


async def send(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    prompt: Prompt,
    tokenizer: Tokenizer | None,
    count: str = "auto",
    result: RequestResult | None = None,
) -> RequestResult:
    """Stream one request into `result` (filled in place, so a cancelled request keeps what it got)."""
    result = result if result is not None else RequestResult(ok=False)
    usage: dict[str, Any] | None = None
    chunks = 0
    parts = result.parts
    result.sent = True
    started = time.perf_counter()
    last = started
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", "replace")[:300]
                result.error = f"HTTP {response.status_code}: {detail}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    result.error = json.dumps(chunk["error"])[:300]
                    return result
                if chunk.get("usage"):
                    usage = chunk["usage"]
                content = chunk_content(chunk)
                if not content:
                    continue
                now = time.perf_counter()
                if chunks == 0:
                    result.ttft = now - started
                else:
                    result.itl.append(now - last)
                last = now
                chunks += 1
                parts.append(content)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:300]
        return result
    result.e2e = time.perf_counter() - started
    result.text = "".join(parts)
    if chunks == 0:
        result.error = "no content in the stream"
        return result
    result.ok = True
    if usage and usage.get("completion_tokens") and count != "tokenizer":
        result.output_tokens = int(usage["completion_tokens"])
        result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        result.token_source = "usage"
    elif tokenizer is not None:
        result.output_tokens = max(1, tokenizer.count(result.text))
        result.token_source = "tokenizer"
    else:
        result.output_tokens = chunks
    if not result.prompt_tokens and prompt.prompt_tokens is not None:
        result.prompt_tokens = prompt.prompt_tokens
    return result


# ---- the load -----------------------------------------------------------------------------------------


async def arrivals(count: int, rate: float, rng: random.Random) -> Any:
    """Yield request indices, spaced by exponential gaps (a Poisson process) unless the rate is infinite."""
    for i in range(count):
        yield i
        if math.isfinite(rate) and i + 1 < count:
            await asyncio.sleep(rng.expovariate(rate))


async def run_load(
    args: argparse.Namespace, prompts: list[Prompt], model: str, tokenizer: Tokenizer | None
) -> tuple[list[RequestResult], float]:
    url = args.base_url.rstrip("/") + (
        "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    )
    concurrency = args.max_concurrency or len(prompts)
    semaphore = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    timeout = httpx.Timeout(args.timeout, connect=30.0)
    results = [RequestResult(ok=False) for _ in prompts]
    async with httpx.AsyncClient(limits=limits, headers=headers, timeout=timeout) as client:

        async def one(i: int) -> RequestResult:
            async with semaphore:
                body = request_body(args, prompts[i], model)
                return await send(client, url, body, prompts[i], tokenizer, args.count_tokens, results[i])

        tasks: list[asyncio.Task[RequestResult]] = []

        async def issue() -> None:
            async for i in arrivals(len(prompts), args.request_rate, random.Random(args.seed + 1)):
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)

        started = time.perf_counter()
        try:
            await asyncio.wait_for(issue(), timeout=args.time_limit)
        except TimeoutError:
            # wait_for cancelled the arrivals and every request still streaming; count what they got.
            await asyncio.gather(*tasks, return_exceptions=True)
            for result in results:
                if result.sent and not result.ok and not result.error:
                    finish_cut(result, tokenizer)
        duration = time.perf_counter() - started
    return results, duration


def finish_cut(result: RequestResult, tokenizer: Tokenizer | None) -> None:
    result.cut = True
    result.error = "cut at the time limit"
    result.text = "".join(result.parts)
    result.output_tokens = tokenizer.count(result.text) if tokenizer is not None else len(result.parts)


async def warm_up(args: argparse.Namespace, model: str) -> None:
    prompt = Prompt(messages=[{"role": "user", "content": "Say hi."}], max_tokens=4)
    url = args.base_url.rstrip("/") + (
        "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    )
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(args.timeout)) as client:
        result = await send(client, url, request_body(args, prompt, model), prompt, None)
    if not result.ok:
        raise SystemExit(f"warm-up request failed: {result.error}")


def discover_model(args: argparse.Namespace) -> str:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    response = httpx.get(args.base_url.rstrip("/") + "/v1/models", headers=headers, timeout=30)
    response.raise_for_status()
    data = response.json().get("data") or []
    if not data:
        raise SystemExit("the server lists no models; pass --model")
    return str(data[0]["id"])


# ---- speculative decoding counters --------------------------------------------------------------------

# A sample line: name, optional {labels}, value (an optional timestamp after it is ignored).
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{.*\})?\s+(\S+)")
SPEC_COUNTERS = {
    "draft_tokens": "spec_decode_num_draft_tokens_total",
    "accepted_tokens": "spec_decode_num_accepted_tokens_total",
}


def parse_spec_counters(text: str) -> dict[str, float] | None:
    """The spec-decode counters of a Prometheus text exposition, summed over labels; None if absent."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None:
            continue
        name, value = sample.group(1), sample.group(2)
        for key, suffix in SPEC_COUNTERS.items():
            if name == suffix or name.endswith((":" + suffix, "_" + suffix)):
                try:
                    found[key] = found.get(key, 0.0) + float(value)
                except ValueError:
                    continue
    return found if set(found) == set(SPEC_COUNTERS) else None


def scrape_spec_counters(args: argparse.Namespace) -> dict[str, float] | None:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        response = httpx.get(args.base_url.rstrip("/") + "/metrics", headers=headers, timeout=30)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_spec_counters(response.text)


def spec_report(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any]:
    if before is None or after is None:
        return {"draft_tokens": None, "accepted_tokens": None, "acceptance_rate": None}
    draft = after["draft_tokens"] - before["draft_tokens"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    return {
        "draft_tokens": draft,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft if draft > 0 else None,
    }


# ---- the report ---------------------------------------------------------------------------------------


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0}
    ordered = sorted(values)

    def pct(q: float) -> float:
        # Linear interpolation between closest ranks, as numpy's default percentile does.
        pos = (len(ordered) - 1) * q
        low = math.floor(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return {"mean": statistics.fmean(ordered), "p50": pct(0.5), "p99": pct(0.99)}


def report(
    args: argparse.Namespace, model: str, results: list[RequestResult], duration: float
) -> dict[str, Any]:
    done = [r for r in results if r.ok]
    cut = [r for r in results if r.cut]
    # Tokens streamed by requests cut at the time limit happened inside the window: they count as output.
    output_tokens = sum(r.output_tokens for r in done) + sum(r.output_tokens for r in cut)
    prompt_tokens = sum(r.prompt_tokens for r in done)
    ms = 1000.0
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    sources = sorted({r.token_source for r in done})
    return {
        "label": args.label,
        "base_url": args.base_url,
        "model": model,
        "dataset": args.dataset,
        "num_prompts": len(results),
        "max_concurrency": args.max_concurrency,
        "request_rate": args.request_rate if math.isfinite(args.request_rate) else "inf",
        "max_tokens": args.max_tokens,
        "completed": len(done),
        "errors": sum(1 for r in results if r.sent and not r.ok and not r.cut),
        "cut_at_time_limit": len(cut),
        "not_sent": sum(1 for r in results if not r.sent),
        "time_limit_s": args.time_limit,
        "error_samples": sorted({r.error for r in results if r.sent and not r.ok and not r.cut})[:5],
        "duration_s": duration,
        "total_input_tokens": prompt_tokens,
        "total_output_tokens": output_tokens,
        "token_source": ",".join(sources),
        "request_throughput": len(done) / duration if duration else 0.0,
        "output_throughput": output_tokens / duration if duration else 0.0,
        "total_token_throughput": (prompt_tokens + output_tokens) / duration if duration else 0.0,
        # Prompt tokens over the time to their first token: the prefill rate (load (p), one at a time).
        "prompt_throughput": prompt_tokens / sum(r.ttft for r in done) if done and prompt_tokens else 0.0,
        "ttft_ms": {k: v * ms for k, v in summary([r.ttft for r in done]).items()},
        "tpot_ms": {k: v * ms for k, v in summary(tpot).items()},
        "itl_ms": {k: v * ms for k, v in summary([g for r in done for g in r.itl]).items()},
        "e2e_ms": {k: v * ms for k, v in summary([r.e2e for r in done]).items()},
    }


def print_report(data: dict[str, Any]) -> None:
    title = f" Serving benchmark: {data['label'] or data['base_url']} "
    print(f"{title:=^60}")
    rows = [
        ("Successful requests", f"{data['completed']}"),
        ("Errors", f"{data['errors']}"),
        ("Cut at the time limit / not sent", f"{data['cut_at_time_limit']} / {data['not_sent']}"),
        ("Benchmark duration (s)", f"{data['duration_s']:.2f}"),
        ("Total input tokens", f"{data['total_input_tokens']}"),
        ("Total output tokens", f"{data['total_output_tokens']} ({data['token_source']})"),
        ("Request throughput (req/s)", f"{data['request_throughput']:.2f}"),
        ("Output token throughput (tok/s)", f"{data['output_throughput']:.2f}"),
        ("Total token throughput (tok/s)", f"{data['total_token_throughput']:.2f}"),
    ]
    for name, value in rows:
        print(f"{name:<40}{value:>20}")
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E latency")):
        stats = data[key]
        line = f"mean {stats['mean']:.1f}  p50 {stats['p50']:.1f}  p99 {stats['p99']:.1f}"
        print(f"{'-' * 60}\n{name + ' (ms)':<20}{line:>40}")
    if "spec_decode" in data:
        spec = data["spec_decode"]
        rate = spec["acceptance_rate"]
        line = "n/a"
        if spec["draft_tokens"] is not None:
            line = f"{spec['accepted_tokens']:.0f} / {spec['draft_tokens']:.0f}"
            line += "" if rate is None else f" = {rate:.1%}"
        print(f"{'-' * 60}\n{'Spec decode accepted / drafted':<40}{line:>20}")
    for sample in data["error_samples"]:
        print(f"error: {sample}", file=sys.stderr)
    print("=" * 60)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="server root (without /v1)")
    p.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    p.add_argument("--model", help="model name to send (default: the first of GET /v1/models)")
    p.add_argument("--api-key", help="sent as a Bearer token")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-concurrency", type=int, default=None, help="at most this many requests in flight")
    p.add_argument(
        "--request-rate", type=float, default=math.inf, help="Poisson arrivals per second (inf: all at once)"
    )
    p.add_argument("--dataset", choices=("fixed", "random", "shared-prefix", "edit"), default="fixed")
    p.add_argument("--random-input-len", type=int, default=256, help="random dataset: mean prompt tokens")
    p.add_argument(
        "--random-range-ratio", type=float, default=0.5, help="random dataset: +/- spread of lengths"
    )
    p.add_argument(
        "--shared-prefix-len", type=int, default=400, help="shared-prefix dataset: system prompt tokens"
    )
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--ignore-eos", action="store_true", help="send ignore_eos: true (vLLM extension)")
    p.add_argument("--tokenizer", help="local HF tokenizer dir: exact prompt sizes and token counts")
    p.add_argument(
        "--count-tokens",
        choices=("auto", "tokenizer"),
        default="auto",
        help="auto: the server's usage, else --tokenizer, else chunks; tokenizer: always --tokenizer",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout (s)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="stop the whole load after this many seconds; unfinished requests are reported as cut",
    )
    p.add_argument("--no-warm-up", action="store_true")
    p.add_argument(
        "--spec-metrics",
        action="store_true",
        help="report the speculative-decoding acceptance rate from GET /metrics before and after the load",
    )
    p.add_argument("--label", default="", help="a name for this run in the output")
    p.add_argument(
        "--json", dest="json_path", help="also write the results as JSON to this file ('-': stdout)"
    )
    args = p.parse_args(argv)
    if args.num_prompts < 1:
        p.error("--num-prompts must be at least 1")
    if args.count_tokens == "tokenizer" and not args.tokenizer:
        p.error("--count-tokens tokenizer needs --tokenizer")
    if args.request_rate <= 0:
        p.error("--request-rate must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tokenizer = Tokenizer(args.tokenizer) if args.tokenizer else None
    model = args.model or discover_model(args)
    prompts = build_prompts(args, tokenizer)
    if not args.no_warm_up:
        asyncio.run(warm_up(args, model))
    before = scrape_spec_counters(args) if args.spec_metrics else None
    results, duration = asyncio.run(run_load(args, prompts, model, tokenizer))
    data = report(args, model, results, duration)
    if args.spec_metrics:
        data["spec_decode"] = spec_report(before, scrape_spec_counters(args))
    data["requests"] = [
        {k: v for k, v in asdict(r).items() if k not in ("itl", "text", "parts")} | {"text": r.text[:200]}
        for r in results
    ]
    if args.json_path == "-":
        json.dump(data, sys.stdout, indent=1)
        print()
    else:
        print_report(data)
        if args.json_path:
            Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_path).write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0 if data["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
