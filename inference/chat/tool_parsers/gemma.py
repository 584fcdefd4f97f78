"""Gemma's function calls.

- ``gemma3`` (Gemma 3, prompted function calling): calls are Python in a fenced block,
  ```` ```tool_code\\nNAME(arg=value, ...)\\n``` ````, one call per line (or a list of calls).
  Arguments are keyword arguments with literal values; JSON's ``true``, ``false`` and ``null``
  read too. Nothing else is evaluated.
- ``gemma4`` (Gemma 4's native tokens): ``<|tool_call>call:NAME{key:value,...}<tool_call|>``,
  values in Gemma 4's own notation: strings between ``<|"|>`` delimiters, bare numbers,
  ``true``/``false``/``null``, ``{k:v}`` objects with bare keys, ``[v,...]`` arrays. Gemma 4
  reasons in ``<|channel>thought\\n...<channel|>``.
"""

from __future__ import annotations

import ast
import json
import re
from typing import List, Optional

from .base import Schemas, ToolCall, ToolFormat, new_tool_call

_JSON_NAMES = {"true": True, "false": False, "null": None}


def _literal(node: ast.AST):
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.List):
        return [_literal(n) for n in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("** in a literal")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    return ast.literal_eval(node)


def _python_call(node: ast.AST) -> ToolCall:
    if not isinstance(node, ast.Call) or node.args:
        raise ValueError("a tool_code call is NAME(keyword=value, ...)")
    name = ast.unparse(node.func)
    if not re.fullmatch(r"[\w.]+", name):
        raise ValueError("a call needs a function name")
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError("**kwargs in a call")
        arguments[keyword.arg] = _literal(keyword.value)
    return new_tool_call(name, arguments)


class Gemma3Format(ToolFormat):
    def __init__(self):
        super().__init__("gemma3", ("```tool_code",), "```")

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        try:
            module = ast.parse(body.strip(), mode="exec")
        except SyntaxError as exc:
            raise ValueError(f"not a Python call: {exc.msg}") from None
        calls = []
        for statement in module.body:
            if not isinstance(statement, ast.Expr):
                raise ValueError("tool_code holds calls only")
            value = statement.value
            for node in value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]:
                calls.append(_python_call(node))
        if not calls:
            raise ValueError("no call in tool_code")
        return calls


QUOTE = '<|"|>'
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
_WORD = re.compile(r"[^\s,:{}\[\]]+")


class _Reader:
    """Gemma 4's value notation, read by recursive descent; ValueError on anything else."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def take(self, token: str) -> bool:
        self.space()
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            raise ValueError(f"expected {token!r} at {self.text[self.pos : self.pos + 20]!r}")

    def value(self):
        self.space()
        if self.take(QUOTE):
            end = self.text.find(QUOTE, self.pos)
            if end < 0:
                raise ValueError("unterminated string")
            value, self.pos = self.text[self.pos : end], end + len(QUOTE)
            return value
        if self.take("{"):
            return self.object_rest()
        if self.take("["):
            items = []
            if not self.take("]"):
                items.append(self.value())
                while self.take(","):
                    items.append(self.value())
                self.expect("]")
            return items
        number = _NUMBER.match(self.text, self.pos)
        if number:
            self.pos = number.end()
            return json.loads(number.group())
        word = _WORD.match(self.text, self.pos)
        if word and word.group() in _JSON_NAMES:
            self.pos = word.end()
            return _JSON_NAMES[word.group()]
        raise ValueError(f"no value at {self.text[self.pos : self.pos + 20]!r}")

    def object_rest(self) -> dict:
        """The members of an object whose ``{`` was read, through its ``}``."""
        found = {}
        if self.take("}"):
            return found
        while True:
            self.space()
            key = _WORD.match(self.text, self.pos)
            if key is None:
                raise ValueError("an object key is a bare word")
            self.pos = key.end()
            self.expect(":")
            found[key.group()] = self.value()
            if self.take("}"):
                return found
            self.expect(",")


class Gemma4Format(ToolFormat):
    def __init__(self):
        super().__init__(
            "gemma4",
            ("<|tool_call>",),
            "<tool_call|>",
            reasoning=("<|channel>thought\n", "<channel|>"),
            stops=("<|tool_response>",),
        )

    def parse(self, body: str, schemas: Optional[Schemas] = None) -> List[ToolCall]:
        reader, calls = _Reader(body), []
        while reader.take("call:"):
            name = re.compile(r"[\w.-]+").match(reader.text, reader.pos)
            if name is None:
                raise ValueError("call: is followed by the function's name")
            reader.pos = name.end()
            reader.expect("{")
            calls.append(new_tool_call(name.group(), reader.object_rest()))
        reader.space()
        if not calls or reader.pos != len(body):
            raise ValueError("a Gemma 4 call is call:NAME{...}")
        return calls
