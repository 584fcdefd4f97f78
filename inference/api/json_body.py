"""Request bodies of the API, parsed from JSON with a bound on how deeply they nest.

A body nested hundreds of levels deep is valid JSON (Python's parser takes about a thousand), but
everything after the parser walks it recursively: pydantic, ``dataclasses.asdict`` of the job,
Jinja's ``tojson`` in chat templates, the JSON-schema compiler of structured output. One of them
would hit Python's recursion limit and turn bad input into a 500 (found by tests/test_api_fuzz.py).
So a body deeper than ``MAX_DEPTH`` is refused as a 400 when it is parsed, before anything
reads it. The walk is iterative: the check itself cannot overflow.
"""
from __future__ import annotations

import json

from ninja.parser import Parser

# Objects and arrays inside one another, the body's own object counting as 1. A chat request with
# a tool whose parameters schema nests 50 levels is about 57: far beyond what clients send.
MAX_DEPTH = 64


class BodyTooDeep(ValueError):
    """The body nests objects and arrays deeper than ``MAX_DEPTH``."""


def parse(raw: bytes):
    """The JSON value of ``raw``; ValueError when it is not JSON (``UnicodeDecodeError`` is one),
    ``BodyTooDeep`` when it nests too deeply."""
    value = json.loads(raw)
    check_depth(value)
    return value


def check_depth(value, limit: int = MAX_DEPTH) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            raise BodyTooDeep(f"The request body nests objects and arrays more than {limit} levels deep")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


class JsonBodyParser(Parser):
    """django-ninja's body parser with the depth bound. ninja wraps whatever it raises in an
    ``HttpError(400)`` whose ``__cause__`` is the original error (see ``error_message``)."""

    def parse_body(self, request):
        return parse(request.body)


def error_message(exc: Exception) -> str:
    """The client's message for a body ninja could not parse."""
    if isinstance(exc.__cause__, BodyTooDeep):
        return str(exc.__cause__)
    return "The request body is not valid JSON"
