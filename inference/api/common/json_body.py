"""Request bodies of the API, parsed from JSON with a bound on how deeply they nest.

A body nested hundreds of levels deep is valid JSON (Python's parser takes about a thousand), but
everything after the parser walks it recursively: pydantic, ``dataclasses.asdict`` of the job,
Jinja's ``tojson`` in chat templates, the JSON-schema compiler of structured output. One of them
would hit Python's recursion limit and turn bad input into a 500 (found by tests/live/test_api_fuzz.py).
So a body deeper than ``MAX_DEPTH`` is refused as a 400 when it is parsed, before anything
reads it. The walk is iterative: the check itself cannot overflow.

The same walk refuses strings that are not Unicode text: JSON escapes can spell a lone UTF-16
surrogate (``"\\ud800"``), which Python keeps in a ``str`` but no tokenizer can encode; the 400
then names the problem instead of failing somewhere downstream (a template, the tokenizer).
"""

from __future__ import annotations

import json

from ninja.parser import Parser

# Objects and arrays inside one another, the body's own object counting as 1. A chat request with
# a tool whose parameters schema nests 50 levels is 56: far beyond what clients send.
MAX_DEPTH = 64


class BodyTooDeep(ValueError):
    """The body nests objects and arrays deeper than ``MAX_DEPTH``."""


class BodyNotText(ValueError):
    """A string of the body (a value or a key) holds a lone surrogate."""


def parse(raw: bytes):
    """The JSON value of ``raw``; ValueError when it is not JSON (``UnicodeDecodeError`` is one),
    ``BodyTooDeep`` when it nests too deeply, ``BodyNotText`` for a lone surrogate."""
    value = json.loads(raw)
    check(value)
    return value


def check(value, limit: int = MAX_DEPTH) -> None:
    _check_text(value)
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            for key in item:
                _check_text(key)
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise BodyTooDeep(f"The request body nests objects and arrays more than {limit} levels deep")
        for child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
            elif isinstance(child, str):
                _check_text(child)


def _check_text(value) -> None:
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BodyNotText(
                f"The request body has a string with a lone surrogate "
                f"({exc.object[exc.start]!a}): text must be valid Unicode"
            ) from None


class JsonBodyParser(Parser):
    """django-ninja's body parser with these checks. ninja wraps whatever it raises in an
    ``HttpError(400)`` whose ``__cause__`` is the original error (see ``error_message``)."""

    def parse_body(self, request):
        return parse(request.body)


def error_message(exc: Exception) -> str:
    """The client's message for a body ninja could not parse."""
    if isinstance(exc.__cause__, (BodyTooDeep, BodyNotText)):
        return str(exc.__cause__)
    return "The request body is not valid JSON"
