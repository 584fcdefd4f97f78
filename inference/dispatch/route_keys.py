"""The route keys of a request: what the server, which never tokenizes (in Redis mode it loads no
model), can know of the prefix a worker's block cache would hold for it.

A chat request's keys are a hash chain over its messages in canonical JSON (sorted keys, no spaces):
the root covers what shapes the rendered prompt before the first message (model, cache salt,
tools, tool choice, template kwargs), and key ``i`` covers messages ``0..i``. A conversation
that grows by one turn keeps every key of the previous turn as a prefix of its own chain, as its
tokens keep the previous prompt's blocks. A text completion's keys chain fixed chunks of its first
prompt (``TEXT_CHUNK`` characters, or ``TOKEN_CHUNK`` token ids).

Each key is the first 8 bytes of a SHA-256 (16 hex digits): compact enough that a worker can
publish thousands of them (inference/dispatch/worker_summary.py); a collision only sends a request
to a worker that then misses (the block cache still compares tokens).

``route(job)`` adds what the router weighs (inference/dispatch/router.py): an estimate of the
prompt tokens up to each key (``CHARS_PER_TOKEN`` characters of canonical JSON or text per
token; token ids count as themselves), of the whole prompt, and of the tokens to generate.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, List

KEY_HEX = 16
MAX_KEYS = 256  # a longer chain keeps its first keys (the long shared prefix is what counts)
TEXT_CHUNK = 256
TOKEN_CHUNK = 64
CHARS_PER_TOKEN = 4  # a rough mean of BPE tokenizers on English and code
DEFAULT_MAX_TOKENS = 256  # SamplingParams.max_tokens, when a request names none


@dataclass
class Route:
    """A request as the router sees it. ``keys``: the key chain, first key first; ``tokens[i]``:
    the estimated prompt tokens that keys ``0..i`` cover (non-decreasing, at most
    ``prompt_tokens``); ``prompt_tokens``: the estimated tokens of every prompt of the request;
    ``decode_tokens``: at most how many tokens it generates (max_tokens x choices)."""

    keys: List[str] = field(default_factory=list)
    tokens: List[int] = field(default_factory=list)
    prompt_tokens: int = 0
    decode_tokens: int = 0

    def held_tokens(self, matched: int) -> int:
        """The estimated prompt tokens of the first ``matched`` keys."""
        return self.tokens[matched - 1] if matched > 0 else 0


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _chain(root: Any, parts: List[Any]) -> List[str]:
    digest = hashlib.sha256(b"omlx-route-v1\0" + _canonical(root)).digest()
    keys = []
    for part in parts[:MAX_KEYS]:
        digest = hashlib.sha256(digest + _canonical(part)).digest()
        keys.append(digest[: KEY_HEX // 2].hex())
    return keys


def route_keys(job) -> List[str]:
    """The key chain of a ``GenerationJob`` (or its ``to_dict()``), first key first."""
    return _keys(_getter(job))


def _getter(job):
    return job.get if isinstance(job, dict) else lambda name: getattr(job, name)


def _estimate(part: Any) -> int:
    """Estimated tokens of a message or a prompt chunk."""
    if isinstance(part, list) and all(isinstance(t, int) for t in part):
        return len(part)  # token ids
    text = part if isinstance(part, str) else _canonical(part).decode()
    return -(-len(text) // CHARS_PER_TOKEN)


def route(job) -> Route:
    """The keys of a ``GenerationJob`` (or its ``to_dict()``) with the sizes the router weighs."""
    get = _getter(job)
    keys = _keys(get)
    messages = get("messages")
    prompts = get("prompts") or []
    if messages is not None:
        parts, whole, choices = list(messages), list(messages), 1
    elif prompts:
        first = prompts[0]
        size = TEXT_CHUNK if isinstance(first, str) else TOKEN_CHUNK
        parts = [first[i : i + size] for i in range(0, len(first), size)]
        whole, choices = list(prompts), len(prompts)
    else:
        parts, whole, choices = [], [], 1
    # The root (tools, template kwargs) is rendered before the first message: it counts with key 0.
    root = sum(_estimate(v) for v in (get("tools"), get("chat_template_kwargs")) if v)
    running, tokens = root, []
    for part in parts[: len(keys)]:
        running += _estimate(part)
        tokens.append(running)
    prompt_tokens = max(root + sum(_estimate(p) for p in whole), running)
    params = get("params") or {}
    max_tokens = params.get("max_tokens") if isinstance(params, dict) else None
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
        max_tokens = DEFAULT_MAX_TOKENS
    n = get("n") or 1
    return Route(keys, tokens, prompt_tokens, max_tokens * n * choices)


def _keys(get) -> List[str]:
    root = {
        "model": get("model"),
        "salt": get("cache_salt"),
        "tools": get("tools"),
        "tool_choice": get("tool_choice"),
        "kwargs": get("chat_template_kwargs") or {},
    }
    messages = get("messages")
    if messages is not None:
        return _chain(root, list(messages))
    prompts = get("prompts") or []
    if not prompts:
        return []
    prompt = prompts[0]
    if isinstance(prompt, str):
        parts = [prompt[i : i + TEXT_CHUNK] for i in range(0, len(prompt), TEXT_CHUNK)]
    else:
        parts = [list(prompt[i : i + TOKEN_CHUNK]) for i in range(0, len(prompt), TOKEN_CHUNK)]
    return _chain(dict(root, text=isinstance(prompt, str)), parts)
