"""What benchmarks/bench_grammar.py measures: the grammars, the vocabularies and the three grammar
engines behind one small interface (``ENGINES[name](tokens, eos, specials, vocab_size)``, then
``compile(schema)`` -> ``matcher(compiled)`` with ``fill(bitmask)``, ``advance(token)``, ``done()``).

Vocabularies: a model folder's byte-level BPE tokenizer (``tokenizer_vocab``) or a synthetic one of
any size shaped like a large BPE vocabulary (``synthetic_vocab``); the model folders come from
inference/testkit/ (``model_folder``). The timing itself is bench_grammar.py's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["street"],
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "number"}},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "tags"],
}
GRAMMARS = {"json_object": {"type": "object"}, "json_schema": SCHEMA}


# -- vocabularies --------------------------------------------------------------------------


def model_folder(preset: str) -> Path:
    from inference.testkit.registry import build_model

    for base in (
        Path("/work/main/benchmarks/out/models"),
        REPO / "benchmarks" / "out" / "models",
        Path("/tmp/omlx-bench-grammar"),
    ):
        path = base / f"qwen2-{preset}"
        if (path / "config.json").exists():
            return path
    path = Path("/tmp/omlx-bench-grammar") / f"qwen2-{preset}"
    print(f"building {preset} model in {path} ...", flush=True)
    build_model(path, arch="qwen2", preset=preset, seed=0)
    return path


def tokenizer_vocab(folder: Path):
    """(token bytes per id, eos id) of a model folder's byte-level BPE tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    byte_of = _byte_decoder()
    tokens = []
    for i in range(len(tok)):
        piece = tok.convert_ids_to_tokens(i)
        if i in tok.all_special_ids:
            tokens.append(piece.encode())
        else:
            tokens.append(bytes(byte_of[c] for c in piece))
    return tokens, tok.eos_token_id, sorted(tok.all_special_ids)


def _byte_decoder():
    # GPT-2's printable stand-ins for the 256 byte values
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def synthetic_vocab(size: int, seed: int = 0):
    """A byte-level vocabulary of ``size`` tokens shaped like a large BPE vocabulary; the last
    three ids are special tokens, the very last the EOS."""
    rng = random.Random(seed)
    tokens = [bytes([b]) for b in range(256)]
    seen = set(tokens)
    letters = "abcdefghijklmnopqrstuvwxyz"
    punct = '{}[]":,.-_ \n\t'
    kinds = ["word", "word", "word", "word", "Word", "digits", "punct", "space", "cjk"]
    while len(tokens) < size - 3:
        kind = rng.choice(kinds)
        if kind in ("word", "Word"):
            w = "".join(rng.choice(letters) for _ in range(rng.randint(2, 10)))
            w = w.capitalize() if kind == "Word" else w
            t = (" " + w if rng.random() < 0.5 else w).encode()
        elif kind == "digits":
            t = "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 3))).encode()
        elif kind == "punct":
            t = "".join(rng.choice(punct) for _ in range(rng.randint(2, 5))).encode()
        elif kind == "space":
            t = (" " * rng.randint(2, 16) if rng.random() < 0.5 else "\n" + " " * rng.randint(0, 12)).encode()
        else:
            t = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.randint(1, 2))).encode()
        if t not in seen:
            seen.add(t)
            tokens.append(t)
    tokens += [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"]
    return tokens, size - 1, [size - 3, size - 2, size - 1]


def _greedy_tokenize(tokens):
    """Longest-match tokenization over the vocabulary (llguidance asks for a tokenizer)."""
    index = {t: i for i, t in enumerate(tokens)}
    longest = max(len(t) for t in tokens)

    def encode(data: bytes):
        out, i = [], 0
        while i < len(data):
            for n in range(min(longest, len(data) - i), 0, -1):
                tid = index.get(data[i : i + n])
                if tid is not None:
                    out.append(tid)
                    i += n
                    break
        return out

    return encode


# -- engines: make(tokens, eos, specials) -> compile(schema) -> matcher -------------------------


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokens, eos, specials, vocab_size):
        import xgrammar as xgr
        import torch

        self.xgr, self.torch = xgr, torch
        vocab = [t.decode("latin-1") if i not in specials else t.decode() for i, t in enumerate(tokens)]
        info = xgr.TokenizerInfo(
            vocab, vocab_type=xgr.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=[eos]
        )
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)

    def compile(self, schema):
        if schema == {"type": "object"}:
            return self.compiler.compile_builtin_json_grammar()
        return self.compiler.compile_json_schema(json.dumps(schema))

    def matcher(self, compiled):
        return _XMatcher(self.xgr.GrammarMatcher(compiled), self.torch)


class _XMatcher:
    def __init__(self, m, torch):
        self.m, self.torch = m, torch

    def fill(self, bitmask):
        self.m.fill_next_token_bitmask(self.torch.from_numpy(bitmask))

    def advance(self, token):
        assert self.m.accept_token(token)

    def done(self):
        return self.m.is_terminated()


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokens, eos, specials, vocab_size):
        import llguidance

        self.ll = llguidance
        wrapper = _LLVocab(tokens, eos, specials)
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(wrapper), n_vocab=vocab_size)

    def compile(self, schema):
        grammar = self.ll.LLMatcher.grammar_from_json_schema(schema)
        m = self.ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        assert not m.is_error(), m.get_error()
        return m

    def matcher(self, compiled):
        return _LLMatcher(compiled.deep_copy())


class _LLVocab:
    def __init__(self, tokens, eos, specials):
        # llguidance marks special tokens with a leading 0xFF byte
        self.tokens = [b"\xff" + t if i in specials else t for i, t in enumerate(tokens)]
        self.eos_token_id, self.bos_token_id = eos, None
        self.special_token_ids = list(specials)
        self._encode = _greedy_tokenize(tokens)

    def __call__(self, data):
        return self._encode(data if isinstance(data, bytes) else data.encode())


class _LLMatcher:
    def __init__(self, m):
        self.m = m

    def fill(self, bitmask):
        self.m.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)

    def advance(self, token):
        assert self.m.consume_token(token), self.m.get_error()

    def done(self):
        return self.m.is_stopped()


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, tokens, eos, specials, vocab_size):
        import outlines_core

        self.oc = outlines_core
        mapping = {}
        for i, t in enumerate(tokens):
            if i not in specials:
                mapping.setdefault(t, []).append(i)
        self.vocab = outlines_core.Vocabulary(eos, mapping)

    def compile(self, schema):
        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(schema))
        return self.oc.Index(regex, self.vocab)

    def matcher(self, compiled):
        return _OCMatcher(self.oc.Guide(compiled))


class _OCMatcher:
    def __init__(self, g):
        self.g = g

    def fill(self, bitmask):
        self.g.write_mask_into(bitmask.ctypes.data, bitmask.size, 4)

    def advance(self, token):
        self.g.advance(token, return_tokens=False)

    def done(self):
        return self.g.is_finished()


ENGINES = {e.name: e for e in (XGrammar, LLGuidance, OutlinesCore)}
