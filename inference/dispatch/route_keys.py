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
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, List

KEY_HEX = 16
MAX_KEYS = 256  # a longer chain keeps its first keys (the long shared prefix is what counts)
TEXT_CHUNK = 256
TOKEN_CHUNK = 64


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
    get = job.get if isinstance(job, dict) else lambda name: getattr(job, name)
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
