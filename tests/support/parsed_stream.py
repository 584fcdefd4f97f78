"""An output parser (inference.chat) fed streamed fragments, for the parser tests
(tests/unit/test_chat_output.py, tests/unit/test_tool_formats.py)."""

import json

from inference.chat.output import ParsedDelta


def parse_parts(parser, parts):
    """``parser`` fed ``parts`` one at a time, then finished: (the sum of its deltas, each delta)."""
    out, deltas = ParsedDelta(), []
    for part in parts:
        deltas.append(parser.feed(part))
        out += deltas[-1]
    deltas.append(parser.finish())
    out += deltas[-1]
    return out, deltas


def splits(text):
    """Every way to cut text in two, and the text one character at a time."""
    yield [text]
    yield list(text)
    for i in range(1, len(text)):
        yield [text[:i], text[i:]]


def names_and_args(out):
    """The tool calls of a parsed output: [(name, arguments as JSON values)]."""
    return [(c.name, json.loads(c.arguments)) for c in out.tool_calls]
