"""Caps on what one API request may make large: every list and string that costs the server
work in proportion to its size (or more) has a most, and a request beyond it gets a 400 naming
the field and the cap, before anything is queued. docs/api.md lists them.

The body as a whole is bounded by ``OMLX_MAX_REQUEST_BYTES`` (413) and its nesting by
``json_body.MAX_DEPTH``; prompts by the model's context (400). These caps bound what is left:
counts of things a request can repeat cheaply in bytes (stop strings, messages, content parts,
tools) and the sizes of what is compiled or stored (schemas, metadata).
"""

from __future__ import annotations

import json
from typing import Optional

from .errors import ApiError

# Stop strings. The text stream checks each new character once against all of them
# (inference/engine/stop_matcher.py), so these bound its building cost and memory.
MAX_STOP = 4  # OpenAI's documented limit: chat, completions, responses
MAX_STOP_SEQUENCES = 16  # Anthropic's stop_sequences (its API documents no number)
MAX_STOP_CHARS = 1_000  # characters of one stop string, on every API

MAX_MESSAGES = 10_000  # chat messages, Anthropic messages, Responses input items
MAX_CONTENT_PARTS = 1_000  # content parts (blocks) of one message, and of Anthropic's system
MAX_TOOLS = 512  # tools offered in one request
MAX_TOOLS_BYTES = 2**20  # the tools' JSON, all of them: rendered into every prompt
MAX_SCHEMA_BYTES = 2**18  # JSON of a structured-output schema (compiled into a grammar)
MAX_TEMPLATE_KWARGS_BYTES = 2**16  # JSON of chat_template_kwargs
MAX_MODEL_CHARS = 1_000  # a model name (echoed in answers and errors)
MAX_OUTPUT_TOKENS = 2**20  # max_tokens times the choices of a request (n, prompts)
# Responses metadata and user, stored with the response: OpenAI's documented limits.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_USER_CHARS = 256


def schema_extra(most: int, item_chars: Optional[int] = None) -> dict:
    """OpenAPI keywords for a list field of at most ``most`` items (of strings of at most
    ``item_chars``): the cap shows in /v1/openapi.json and the schema fuzzer aims at it; the
    view enforces it (``count``, ``stops``) with a clearer message than pydantic's union errors."""
    extra = {"maxItems": most}
    if item_chars is not None:
        extra.update(maxLength=item_chars, items={"type": "string", "maxLength": item_chars})
    return {"json_schema_extra": extra}


def _refuse(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param.split(".")[0].split("[")[0])


def count(items, most: int, param: str, what: str) -> None:
    """At most ``most`` ``what`` in ``items`` (a list; anything else is left to other checks)."""
    if isinstance(items, (list, dict)) and len(items) > most:
        raise _refuse(param, f"at most {most} {what} per request, got {len(items)}")


def chars(text, most: int, param: str) -> None:
    if isinstance(text, str) and len(text) > most:
        raise _refuse(param, f"at most {most} characters, got {len(text)}")


def json_bytes(value, most: int, param: str, what: str) -> None:
    """At most ``most`` bytes of compact JSON in ``value`` (None passes)."""
    if value is None:
        return
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > most:
        raise _refuse(param, f"at most {most} bytes of JSON in {what}, got {size}")


def stops(stop, most: int, param: str) -> None:
    """A stop string or list of them: at most ``most`` strings of ``MAX_STOP_CHARS`` each."""
    if isinstance(stop, str):
        chars(stop, MAX_STOP_CHARS, param)
    elif isinstance(stop, list):
        count(stop, most, param, "stop sequences")
        for i, item in enumerate(stop):
            chars(item, MAX_STOP_CHARS, f"{param}[{i}]")


def content_parts(messages, param: str, key: str = "content") -> None:
    """At most ``MAX_CONTENT_PARTS`` parts in each message's content list (dicts or schemas)."""
    for i, message in enumerate(messages or ()):
        parts = message.get(key) if isinstance(message, dict) else getattr(message, key, None)
        count(parts, MAX_CONTENT_PARTS, f"{param}[{i}].{key}", "content parts in a message")


def tools(value, param: str = "tools") -> None:
    count(value, MAX_TOOLS, param, "tools")
    json_bytes(value, MAX_TOOLS_BYTES, param, "the tools")


def output_tokens(max_tokens, choices: int, param: str) -> None:
    """``max_tokens`` times ``choices`` at most ``MAX_OUTPUT_TOKENS`` (unset passes)."""
    if isinstance(max_tokens, int) and max_tokens * choices > MAX_OUTPUT_TOKENS:
        of = f" x {choices} choices" if choices > 1 else ""
        raise _refuse(
            param,
            f"at most {MAX_OUTPUT_TOKENS} output tokens per request, got {max_tokens}{of}",
        )


def metadata(value, param: str = "metadata") -> None:
    """Stored metadata: at most ``MAX_METADATA_PAIRS`` pairs of short strings."""
    if not isinstance(value, dict):
        return
    count(value, MAX_METADATA_PAIRS, param, "metadata pairs")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise _refuse(param, f"keys of at most {MAX_METADATA_KEY_CHARS} characters, got {len(key)}")
        chars(item, MAX_METADATA_VALUE_CHARS, f"{param}.{key}")
