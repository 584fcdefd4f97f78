"""The scopes a key can have. Each route asks for one (inference/api/common/auth.py); a key
without it gets a 403, a wrong key a 401."""

from __future__ import annotations

from typing import FrozenSet, Iterable

INFERENCE = "inference"
MODELS = "models"
MCP = "mcp"
ADMIN = "admin"

DESCRIPTIONS = {
    INFERENCE: "run models: chat, completions, responses, messages, embeddings, rerank, the model list",
    MODELS: "manage models: load, unload, rescan, status, per-model settings (and pull in the console)",
    MCP: "the MCP tools: list servers and tools, execute a tool",
    ADMIN: "the console and the server's own API: /metrics, cache status, step traces",
}
ALL: FrozenSet[str] = frozenset(DESCRIPTIONS)
DEFAULT = (INFERENCE,)  # what `omlx keys create` gives without --scope


def parse(names: Iterable[str]) -> FrozenSet[str]:
    """The scopes named (empty: ``DEFAULT``); ValueError names an unknown one."""
    scopes = frozenset(name.strip().lower() for name in names if name.strip())
    unknown = sorted(scopes - ALL)
    if unknown:
        raise ValueError(f"unknown scope {unknown[0]!r}: the scopes are {', '.join(sorted(ALL))}")
    return scopes or frozenset(DEFAULT)


def ordered(scopes: Iterable[str]) -> list:
    """In the order of ``DESCRIPTIONS`` (for display)."""
    given = set(scopes)
    return [name for name in DESCRIPTIONS if name in given]
