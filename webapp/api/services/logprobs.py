"""Engine logprobs in OpenAI's two formats: chat (`content` entries) and legacy completions."""

from __future__ import annotations

import math
from typing import Any

from inference.api import Logprob

TokenLogprobs = list[tuple[Logprob, list[Logprob]]]


def _finite(value: float) -> float:
    """JSON has no -inf; a masked or impossible token reports the lowest float instead."""
    return value if math.isfinite(value) else -9999.0


def _entry(lp: Logprob) -> dict[str, Any]:
    return {"token": lp.token, "logprob": _finite(lp.logprob), "bytes": list(lp.token.encode("utf-8"))}


def chat_logprobs(items: TokenLogprobs, top: int) -> list[dict[str, Any]]:
    return [dict(_entry(chosen), top_logprobs=[_entry(t) for t in alts[:top]]) for chosen, alts in items]


LegacyEntry = tuple[str, float | None, dict[str, float] | None]


def legacy_entries(items: TokenLogprobs, top: int) -> list[LegacyEntry]:
    out: list[LegacyEntry] = []
    for chosen, alts in items:
        tops = {t.token: _finite(t.logprob) for t in alts[:top]}
        if top > 0:
            tops.setdefault(chosen.token, _finite(chosen.logprob))
        out.append((chosen.token, _finite(chosen.logprob), tops))
    return out


def legacy_prompt_entries(
    items: list[tuple[Logprob, list[Logprob]] | None], first_token: str, top: int
) -> list[LegacyEntry]:
    """Echoed prompt tokens; the first has no logprob (nothing precedes it), as in OpenAI's output."""
    out: list[LegacyEntry] = []
    for item in items:
        if item is None:
            out.append((first_token, None, None))
        else:
            out.extend(legacy_entries([item], top))
    return out


def completion_logprobs(entries: list[LegacyEntry], *, text_offset: int) -> dict[str, Any]:
    offsets: list[int] = []
    offset = text_offset
    for token, _, _ in entries:
        offsets.append(offset)
        offset += len(token)
    return {
        "tokens": [e[0] for e in entries],
        "token_logprobs": [e[1] for e in entries],
        "top_logprobs": [e[2] for e in entries],
        "text_offset": offsets,
    }
