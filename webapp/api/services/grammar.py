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
from webapp.core.runtime import get_runtime

# JSON without free whitespace: a small model cannot stall the output in an endless run of spaces.
_JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False}
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


def json_schema_grammar(schema: dict[str, Any] | None, *, param: str) -> str:
    """A grammar for JSON matching `schema` (None: any JSON object); 400 when the schema is unusable."""
    effective = schema if schema is not None else {"type": "object"}
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
