"""Constrained decoding with llguidance: a JSON-schema grammar applied as a per-step logits mask.

The engine calls each processor as (prompt + generated ids, logits row) -> logits row. One processor
serves every sequence of a request (n > 1), so matcher states are kept per generated prefix: sequences that
share a prefix share a state, and a sequence whose prefix is unknown (preemption, divergence) is replayed.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.hf
import numpy as np
import torch

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

from inference.api import EngineClient
from webapp.api.services.grammar_sandbox import GrammarSandbox, GrammarTooComplex, parser_limits
from webapp.core.errors import InvalidRequest
from webapp.serving.runtime import get_runtime

# At most one space between JSON tokens (Python's json.dumps style; llama.cpp's former `" "?`). Models write
# `{ "key": ...`: with no whitespace allowed, their likeliest token after `{`, `:` or `,` (a space and a quote
# in one token) is masked and they drift into invented keys and nesting until max_tokens. Newlines are left
# out: allowed, a small model pretty-prints a nested document instead of answering. One match per gap
# between tokens and none after the top-level value, so whitespace cannot stall a generation.
JSON_WHITESPACE = r"\x20"
_JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": True, "whitespace_pattern": JSON_WHITESPACE}
# llguidance's bounds on compiling and masking (webapp.api.services.grammar_sandbox sets them). Schema
# size, depth and regex count are bounded before this, in webapp.api.schemas.common, and each grammar is
# validated in a sandboxed child under a time and memory limit before it is compiled here.
_LIMITS = parser_limits()
# A compile error can quote an expanded regex of any length: clients get the start of it.
_MAX_ERROR_CHARS = 300
# Matcher states older than this many tokens behind the newest cannot be asked for again in lockstep decoding.
_KEEP_BEHIND = 2

_tokenizers: weakref.WeakKeyDictionary[Any, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()
_tokenizers_lock = threading.Lock()


def ll_tokenizer(hf_tokenizer: Any, eos_token_ids: set[int] | None = None) -> llguidance.LLTokenizer:
    """llguidance's view of the vocabulary; built once per tokenizer (it walks every token)."""
    with _tokenizers_lock:
        cached = _tokenizers.get(hf_tokenizer)
        if cached is None:
            eos = sorted(eos_token_ids) if eos_token_ids else None
            cached = llguidance.hf.from_tokenizer(hf_tokenizer, eos_token=eos[0] if eos else None)
            _tokenizers[hf_tokenizer] = cached
        return cached


def warm_grammar(engine: EngineClient) -> None:
    """Build the tokenizer view and start the grammar checkers as a model loads: done on a first grammar
    request instead, the view holds the GIL for ~0.3 s on a CPU and a starting child takes a core, and
    every running stream pauses with them."""
    ll_tokenizer(engine.tokenizer, set(engine.eos_token_ids))
    get_runtime().service(GrammarSandbox).start()


# Keywords whose subschemas are alternatives or parts of the value (narrowing one narrows the whole), and
# those holding maps of them. allOf, not, if/then/else, contains and dependent schemas are left alone: a
# narrowed branch there can widen the schema or make it unsatisfiable.
_SUBSCHEMA = ("additionalProperties", "items", "unevaluatedItems")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def closed_objects(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with objects that list their properties closed to others unless it says otherwise, as
    llama.cpp and xgrammar do. Open, a model that has written every property goes on inventing keys and
    nested objects instead of `}`. The output still validates against the schema as given: only schemas
    whose required keys are all listed are closed, and none reached through allOf, not or if."""
    # A $defs entry may be reached through allOf by a $ref: keep them as written then.
    walk_defs = '"allOf"' not in json.dumps(schema)
    return _close(schema, walk_defs=walk_defs)


def _close(schema: Any, *, walk_defs: bool) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if isinstance(out.get(key), dict):
            out[key] = _close(out[key], walk_defs=walk_defs)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_close(s, walk_defs=walk_defs) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if key in ("$defs", "definitions") and not walk_defs:
            continue
        if isinstance(out.get(key), dict):
            out[key] = {name: _close(s, walk_defs=walk_defs) for name, s in out[key].items()}
    properties = out.get("properties")
    required = out.get("required", [])
    if (
        isinstance(properties, dict)
        and isinstance(required, list)
        and all(name in properties for name in required)
        and not any(k in out for k in ("additionalProperties", "patternProperties", "unevaluatedProperties"))
        and "$ref" not in out  # its target's properties count as listed too
    ):
        out["additionalProperties"] = False
    return out


def json_schema_grammar(schema: dict[str, Any] | None, *, param: str) -> str:
    """A grammar for JSON matching `schema` (None: any JSON object); 400 when the schema is unusable."""
    effective = closed_objects(schema) if schema is not None else {"type": "object"}
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(effective), overrides=_JSON_OPTIONS
        )
    except ValueError as exc:
        raise InvalidRequest(f"invalid JSON schema: {_short(str(exc))}", param=param) from exc
    try:
        is_error, message = get_runtime().service(GrammarSandbox).validate(grammar)
    except GrammarTooComplex as exc:
        raise InvalidRequest(f"unsupported JSON schema: too complex to compile ({exc})", param=param) from exc
    if is_error:
        raise InvalidRequest(f"unsupported JSON schema: {_short(message or 'invalid')}", param=param)
    return grammar


def _short(message: str) -> str:
    return message if len(message) <= _MAX_ERROR_CHARS else message[:_MAX_ERROR_CHARS] + "..."


class GrammarLogitsProcessor:
    """Masks every token the grammar forbids next; after the grammar completes only EOS stays allowed."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str, *, prompt_len: int) -> None:
        self._prompt_len = prompt_len
        self._grammar = grammar
        self._root = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=_LIMITS)
        if self._root.is_error():
            error = _short(self._root.get_error())
            raise InvalidRequest(f"could not compile the grammar: {error}", param="response_format")
        self._states: dict[tuple[int, ...], llguidance.LLMatcher] = {(): self._root}
        self._lock = threading.Lock()
        self._n_vocab = tokenizer.vocab_size
        self._eos = tokenizer.eos_token

    def _state_for(self, generated: tuple[int, ...]) -> llguidance.LLMatcher:
        state = self._states.get(generated)
        if state is not None:
            return state
        parent = self._states.get(generated[:-1]) if generated else None
        if parent is not None:
            state = parent.deep_copy()
            state.consume_token(generated[-1])
        else:
            state = self._root.deep_copy()
            state.consume_tokens(list(generated))
        self._states[generated] = state
        longest = len(generated)
        for key in [k for k in self._states if k and len(k) < longest - _KEEP_BEHIND]:
            del self._states[key]
        return state

    def __call__(self, token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        with self._lock:
            state = self._state_for(tuple(token_ids[self._prompt_len :]))
            allowed = self._allowed(state)
        row_size = logits.shape[-1]
        mask = torch.zeros(row_size, dtype=torch.bool)
        usable = min(row_size, allowed.shape[0])
        mask[:usable] = torch.from_numpy(allowed[:usable])
        return logits.masked_fill(~mask.to(logits.device), float("-inf"))

    def _allowed(self, state: llguidance.LLMatcher) -> np.ndarray:
        if state.is_error():
            # A token slipped past the mask (should not happen): end the sequence rather than emit garbage.
            only_eos = np.zeros(self._n_vocab, dtype=bool)
            only_eos[self._eos] = True
            return only_eos
        bits = np.frombuffer(state.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[: self._n_vocab].astype(bool)
