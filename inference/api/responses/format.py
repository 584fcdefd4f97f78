"""The Response object of OpenAI's Responses API and its stream events, built from generation
events (``inference.generation``).

``ResponseBuilder`` is fed the events of one choice in order. It keeps the output items
(reasoning, message, function_call) and returns, for each event, the stream events it causes;
a non-streaming view feeds it the same way and sends ``body()`` at the end. Invariants: at most
one item is open (receiving deltas) at a time, output indexes are positions in ``output``, and
``sequence_number`` counts every stream event from 0.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import List, Optional

from inference.api.common import limits
from inference.api.common.errors import ApiError
from inference.api.common.stream import Formatter


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseBuilder(Formatter):
    """The ``Formatter`` of POST /v1/responses: typed SSE events (``event:`` and ``data:``
    lines), ``: keep-alive`` comments, the Response object as the body."""

    keepalive = ": keep-alive\n\n"  # an SSE comment: keeps proxies and clients waiting

    def __init__(self, response_id: str, model: str, echo: dict):
        """``echo``: the request fields the Response object repeats (instructions, tools,
        tool_choice, parallel_tool_calls, temperature, top_p, max_output_tokens, text, reasoning,
        metadata, user)."""
        self.id = response_id
        self.model = model
        self.echo = echo
        self.created_at = int(time.time())
        self.completed_at: Optional[int] = None
        self.status = "in_progress"
        self.output: List[dict] = []
        self.usage: Optional[dict] = None
        self.error: Optional[dict] = None
        self.incomplete_reason: Optional[str] = None
        self.reasoning_tokens = 0
        self._open: Optional[dict] = None  # the item receiving deltas
        self._held = 0  # tokens of text-less deltas not yet attributed
        self._reasoning = False  # the last delta with output was reasoning
        self._sequence = 0

    @property
    def finished(self) -> bool:
        return self.status != "in_progress"

    def body(self) -> dict:
        """The Response object as it stands."""
        body = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "completed_at": self.completed_at,
            "model": self.model,
            "output": self.output,
            "error": self.error,
            "incomplete_details": {"reason": self.incomplete_reason} if self.incomplete_reason else None,
            "usage": self.usage,
            "previous_response_id": None,
            "truncation": "disabled",
            "background": False,
        }
        body.update(self.echo)
        return body

    def _event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def frame(self, out: dict) -> str:
        return f"event: {out['type']}\ndata: {json.dumps(out, separators=(',', ':'))}\n\n"

    def start(self, accepted: Optional[dict] = None) -> List[dict]:
        return [
            self._event("response.created", response=self.body()),
            self._event("response.in_progress", response=self.body()),
        ]

    def feed(self, event: dict) -> List[dict]:
        """The stream events caused by one generation ``delta`` event."""
        out: List[dict] = []
        reasoning = event.get("reasoning") or ""
        tool_calls = event.get("tool_calls") or []
        self._count_tokens(event, reasoning, tool_calls)
        if reasoning:
            out += self._append("reasoning", reasoning)
        if event["text"]:
            out += self._append("message", event["text"])
        for call in tool_calls:
            out += self._function_call(call)
        if event["finish_reason"] is not None:
            out += self._finish(event)
        return out

    def _count_tokens(self, event: dict, reasoning: str, tool_calls: list) -> None:
        """Reasoning tokens: those of deltas that carried only reasoning, and of the text-less
        deltas (tokens an output parser held back) just before them or at the end of reasoning."""
        tokens = len(event.get("token_ids") or ())
        if event["text"] or tool_calls:
            self._held, self._reasoning = 0, False
        elif reasoning:
            self.reasoning_tokens += self._held + tokens
            self._held, self._reasoning = 0, True
        elif self._reasoning and event["finish_reason"] is not None:
            self.reasoning_tokens += self._held + tokens
        else:
            self._held += tokens

    def _append(self, kind: str, text: str) -> List[dict]:
        out: List[dict] = []
        if self._open is not None and self._open["type"] != kind:
            out += self._close("completed")
        if self._open is None:
            out += self._add(kind)
        item, index = self._open, len(self.output) - 1
        part = item["content"][0]
        part["text"] += text
        if kind == "message":
            out.append(
                self._event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        else:
            out.append(
                self._event(
                    "response.reasoning_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                )
            )
        return out

    def _add(self, kind: str) -> List[dict]:
        if kind == "message":
            item = {
                "id": _item_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            item = {
                "id": _item_id("rs"),
                "type": "reasoning",
                "status": "in_progress",
                "summary": [],
                "content": [],
            }
            part = {"type": "reasoning_text", "text": ""}
        self.output.append(item)
        index = len(self.output) - 1
        out = [
            self._event("response.output_item.added", output_index=index, item=_copy(item)),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=dict(part),
            ),
        ]
        item["content"].append(part)
        self._open = item
        return out

    def _close(self, status: str) -> List[dict]:
        item, index = self._open, len(self.output) - 1
        self._open = None
        part = item["content"][0]
        if item["type"] == "message":
            done = self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=[],
            )
        else:
            done = self._event(
                "response.reasoning_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
            )
        item["status"] = status
        return [
            done,
            self._event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=dict(part),
            ),
            self._event("response.output_item.done", output_index=index, item=_copy(item)),
        ]

    def _function_call(self, call: dict) -> List[dict]:
        out = self._close("completed") if self._open is not None else []
        item = {
            "id": _item_id("fc"),
            "type": "function_call",
            "status": "in_progress",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": "",
        }
        self.output.append(item)
        index = len(self.output) - 1
        out.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
        item.update(arguments=call["arguments"], status="completed")
        out += [
            self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=call["arguments"],
            ),
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=call["arguments"],
                name=call["name"],
            ),
            self._event("response.output_item.done", output_index=index, item=dict(item)),
        ]
        return out

    def _finish(self, event: dict) -> List[dict]:
        reason = event["finish_reason"]
        if reason in ("error", "abort"):
            self.status = "failed"
            self.error = {
                "code": event.get("code") or "server_error",
                "message": limits.failure_message(event),
            }
            self.failure = ApiError(event.get("status") or 500, self.error["message"], code=event.get("code"))
            return [self._event("response.failed", response=self.body())]
        out: List[dict] = []
        if not self.output:  # nothing was generated: still one (empty) message
            out += self._add("message")
        status = "incomplete" if reason == "length" else "completed"
        if self._open is not None:
            out += self._close(status)
        usage = event["usage"]
        self.usage = {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": usage["cached_tokens"], "cache_write_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {
                "reasoning_tokens": min(self.reasoning_tokens, usage["completion_tokens"])
            },
            "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
        }
        self.status = status
        self.completed_at = int(time.time())
        if status == "incomplete":
            self.incomplete_reason = "max_output_tokens"
            self.completed_at = None
        return out + [self._event(f"response.{status}", response=self.body())]


def _copy(item: dict) -> dict:
    return {**item, "content": [dict(part) for part in item["content"]]}
