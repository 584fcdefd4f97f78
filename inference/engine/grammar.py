"""Structured output: JSON grammars that decide which tokens a request may sample.

The engine is llguidance (chosen by benchmarks/bench_grammar.py; see docs/benchmarks.md).
Three pieces:

- ``check_structured`` validates ``SamplingParams.structured`` without a tokenizer;
- ``GrammarCompiler`` (one per tokenizer) turns a structured value into a compiled
  ``Grammar``, keeping the most recently used ones, so a schema is compiled once;
- ``GrammarMatcher`` is one request's position in its grammar: it writes the bitmask of the
  tokens allowed next and advances by the token sampled. It is rebuilt from the request's
  output tokens whenever the request (re)joins the decode batch.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from functools import lru_cache
from typing import Optional, Sequence

import llguidance
import llguidance.hf
import mlx.core as mx
import numpy as np

# Compact JSON with the usual separators: a model may not pad the output with whitespace,
# which random or weak models otherwise do until max_tokens.
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_JSON_OBJECT = {"type": "object"}
_REPR_LIMIT = 200


def check_structured(value) -> Optional[dict]:
    """``value`` if it is a valid ``structured`` setting, else ValueError("structured=...: why").

    Accepted: None, {"type": "json_object"}, {"type": "json_schema", "schema": {...}}.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        _bad(value, 'must be {"type": "json_object"} or {"type": "json_schema", "schema": {...}}')
    kind = value.get("type")
    if kind == "json_object":
        extra = set(value) - {"type"}
    elif kind == "json_schema":
        extra = set(value) - {"type", "schema"}
        if not isinstance(value.get("schema"), dict):
            _bad(value, "json_schema needs a 'schema' that is a JSON Schema object")
    else:
        _bad(value, "'type' must be 'json_object' or 'json_schema'")
    if extra:
        _bad(value, f"unknown keys {sorted(extra)}")
    try:
        key = _canonical(value)
    except (TypeError, ValueError) as exc:
        _bad(value, f"the schema is not JSON: {exc}")
    error = _grammar_error(key)
    if error:
        _bad(value, f"invalid JSON schema: {error}")
    return value


def _bad(value, why: str):
    text = repr(value)
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    raise ValueError(f"structured={text}: {why}")


def _canonical(structured: dict) -> str:
    # key order kept: the output follows the order of the schema's properties
    return json.dumps(structured, separators=(",", ":"), allow_nan=False)


def _schema(structured: dict) -> dict:
    return _JSON_OBJECT if structured["type"] == "json_object" else structured["schema"]


@lru_cache(maxsize=256)
def _grammar_error(key: str) -> str:
    try:
        grammar = _grammar_text(key)
    except ValueError as exc:
        return str(exc)
    return llguidance.LLMatcher.validate_grammar(grammar)


@lru_cache(maxsize=256)
def _grammar_text(key: str) -> str:
    return llguidance.LLMatcher.grammar_from_json_schema(_schema(json.loads(key)), overrides=_JSON_OPTIONS)


class Grammar:
    """A grammar compiled for one tokenizer: an immutable start state to copy matchers from."""

    def __init__(self, start: llguidance.LLMatcher):
        self._start = start

    def matcher(self, tokens: Sequence[int] = ()) -> "GrammarMatcher":
        """A matcher at the grammar's start, advanced by ``tokens`` (a recomputed request's
        output so far)."""
        m = GrammarMatcher(self._start.deep_copy())
        for t in tokens:
            m.advance(t)
        return m


class GrammarMatcher:
    """One request's position in its grammar (engine thread only)."""

    def __init__(self, matcher: llguidance.LLMatcher):
        self._m = matcher

    def advance(self, token: int) -> None:
        # A token the mask allowed is always accepted; anything else (a stop token id the
        # request was given, say) leaves the matcher in its error state, which ends it.
        self._m.consume_token(token)

    @property
    def finished(self) -> bool:
        """The output is complete (nothing but EOS may follow) or cannot go on."""
        return self._m.is_stopped() or self._m.is_error()

    def fill_mask(self, row: np.ndarray) -> None:
        """Write the allowed-token bitmask (bit t of word t // 32) into ``row`` (int32,
        contiguous, (vocab + 31) // 32 words). A finished matcher allows everything: its
        request ends with the token already sampled, and the row's next pick is dropped."""
        if self.finished:
            row.fill(-1)
        else:
            self._m.unsafe_compute_mask_ptr(row.ctypes.data, row.nbytes)


class GrammarCompiler:
    """Compiles structured values for one tokenizer; keeps the ``capacity`` most recently used
    grammars. Thread-safe (requests are compiled on the submitting thread)."""

    def __init__(self, hf_tokenizer, vocab_size: int, eos_token_ids: Sequence[int], capacity: int = 64):
        self._tokenizer = llguidance.hf.from_tokenizer(
            hf_tokenizer, n_vocab=vocab_size, eos_token=sorted(eos_token_ids)
        )
        self.vocab_size = vocab_size
        self.capacity = capacity
        self._grammars: "OrderedDict[str, Grammar]" = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, structured: dict) -> Grammar:
        """The compiled grammar of a (validated) structured value; ValueError if the grammar
        does not fit this tokenizer."""
        key = _canonical(structured)
        with self._lock:
            grammar = self._grammars.get(key)
            if grammar is not None:
                self._grammars.move_to_end(key)
                return grammar
        start = llguidance.LLMatcher(self._tokenizer, _grammar_text(key), log_level=0)
        if start.is_error():
            _bad(structured, start.get_error())
        grammar = Grammar(start)
        with self._lock:
            self._grammars[key] = grammar
            while len(self._grammars) > self.capacity:
                self._grammars.popitem(last=False)
        return grammar

    def __len__(self):
        return len(self._grammars)


_compilers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_compilers_lock = threading.Lock()


def compiler_for(tokenizer, vocab_size: int) -> GrammarCompiler:
    """The GrammarCompiler of an mlx-lm tokenizer, built on first use (0.5-2.5 s measured for
    a 152k-token vocabulary); ValueError if the tokenizer cannot be used for structured output
    (llguidance needs a Hugging Face "fast" tokenizer)."""
    with _compilers_lock:
        compiler = _compilers.get(tokenizer)
        if compiler is None:
            try:
                compiler = GrammarCompiler(tokenizer._tokenizer, vocab_size, tokenizer.eos_token_ids)
            except ValueError as exc:
                raise ValueError(f"structured output is not available for this model: {exc}") from None
            _compilers[tokenizer] = compiler
        return compiler


def unpack_mask(words: mx.array, vocab_size: int) -> mx.array:
    """[G, W] int32 bitmask -> [G, vocab_size] bool mask, on the device."""
    bits = mx.right_shift(words[..., None], mx.arange(32, dtype=mx.int32)) & 1
    return bits.reshape(words.shape[0], -1)[:, :vocab_size].astype(mx.bool_)
