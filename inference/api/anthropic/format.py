"""Anthropic's Message object and stream events, built from generation events (contract 1).

The stream of one message is: message_start, ping, then for each content block
content_block_start / content_block_delta... / content_block_stop, then message_delta (stop
reason, stop sequence, usage) and message_stop; ping events also keep an idle stream alive.
"""

from __future__ import annotations

import hashlib
import json
from typing import List, Optional, Sequence

from inference.api.common import limits
from inference.api.common.errors import ApiError
from inference.api.common.stream import Formatter

from .errors import error_type

STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}


def sse(event: dict) -> str:
    """One SSE frame: the event's type on the ``event:`` line, the event as JSON on ``data:``."""
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n"


PING = {"type": "ping"}


def error_event(error_type: str, message: str) -> dict:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def usage_body(usage: Optional[dict]) -> dict:
    """Anthropic's split of prompt tokens: ``input_tokens`` were computed, ``cache_read_input_tokens``
    came from the KV cache; omlx caches on its own, so nothing counts as a cache creation."""
    usage = usage or {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    cached = usage["cached_tokens"]
    return {
        "input_tokens": usage["prompt_tokens"] - cached,
        "output_tokens": usage["completion_tokens"],
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def tool_use_id(call_id: str) -> str:
    return "toolu_" + (call_id[5:] if call_id.startswith("call_") else call_id)


def _signature(thinking: str) -> str:
    # Clients hand thinking blocks back with their signature; omlx does not check it.
    return "omlx-" + hashlib.sha256(thinking.encode("utf-8")).hexdigest()


class MessageBuilder(Formatter):
    """Collects one choice's events into content blocks, in the order the model produced them,
    and says which stream events each step adds (the ``Formatter`` of /v1/messages: SSE frames
    with the event's type, pings to keep alive, the Message object as the body).

    Invariant: only the last block of ``content`` may be open (text or thinking growing); a
    tool_use block opens and closes within one step, since tool calls arrive complete.
    """

    def __init__(self, message_id: str, model: str, stop_sequences: Sequence[str] = ()):
        self.id = message_id
        self.model = model
        self.stop_sequences = sorted(stop_sequences, key=len, reverse=True)
        self.content: List[dict] = []
        self.stop_reason: Optional[str] = None
        self.stop_sequence: Optional[str] = None
        self.usage: Optional[dict] = None
        self._open = False

    keepalive = sse(PING)  # keeps clients and proxies waiting through a long prefill

    @property
    def finished(self) -> bool:
        return self.failure is not None or self.stop_reason is not None

    def start(self, accepted: dict) -> List[dict]:
        # message_start carries the prompt's token count, as the worker counted it when it took the job
        return self.start_events(accepted["prompt_tokens"][0])

    def frame(self, out: dict) -> str:
        return sse(out)

    def body(self) -> dict:
        return self.message()

    def message(self, usage: Optional[dict] = None) -> dict:
        """The Message object (with ``usage`` in Anthropic's form; the final usage once finished)."""
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": list(self.content),
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": usage or self.usage or usage_body(None),
        }

    def start_events(self, input_tokens: int) -> List[dict]:
        """message_start (with the prompt's token count, as far as known yet) and a first ping."""
        usage = usage_body({"prompt_tokens": input_tokens, "completion_tokens": 0, "cached_tokens": 0})
        return [{"type": "message_start", "message": self.message(usage)}, PING]

    def feed(self, event: dict) -> List[dict]:
        """The stream events for one delta event; when it finishes the choice, the closing ones too
        (an error event when it failed)."""
        finish = event.get("finish_reason")
        if finish in ("error", "abort"):
            self.failure = ApiError(event.get("status") or 500, limits.failure_message(event))
            return [error_event(error_type(self.failure.status), self.failure.message)]
        text, reasoning = event.get("text") or "", event.get("reasoning") or ""
        if finish == "stop" and self.stop_sequences:
            text, reasoning = self._strip_stop(text, reasoning)
        out: List[dict] = []
        if reasoning:
            out += self._append("thinking", reasoning)
        if text:
            out += self._append("text", text)
        for call in event.get("tool_calls") or ():
            out += self._tool_use(call)
        if finish is not None:
            out += self._close()
            out += self._finish(finish, event.get("usage"))
        return out

    def _strip_stop(self, text: str, reasoning: str):
        """The engine keeps a matched stop sequence at the end of the output: find it, drop it."""
        for stop in self.stop_sequences:
            if text.endswith(stop):
                self.stop_sequence = stop
                return text[: len(text) - len(stop)], reasoning
            if not text and reasoning.endswith(stop):
                self.stop_sequence = stop
                return text, reasoning[: len(reasoning) - len(stop)]
        return text, reasoning

    def _append(self, kind: str, piece: str) -> List[dict]:
        out: List[dict] = []
        if not (self._open and self.content[-1]["type"] == kind):
            out += self._close()
            block = (
                {"type": "text", "text": ""}
                if kind == "text"
                else {"type": "thinking", "thinking": "", "signature": ""}
            )
            self.content.append(block)
            self._open = True
            out.append(
                {"type": "content_block_start", "index": len(self.content) - 1, "content_block": dict(block)}
            )
        self.content[-1][kind] += piece
        delta = (
            {"type": "text_delta", "text": piece}
            if kind == "text"
            else {"type": "thinking_delta", "thinking": piece}
        )
        out.append({"type": "content_block_delta", "index": len(self.content) - 1, "delta": delta})
        return out

    def _close(self) -> List[dict]:
        if not self._open:
            return []
        self._open = False
        index, block = len(self.content) - 1, self.content[-1]
        out: List[dict] = []
        if block["type"] == "thinking":
            block["signature"] = _signature(block["thinking"])
            out.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": block["signature"]},
                }
            )
        out.append({"type": "content_block_stop", "index": index})
        return out

    def _tool_use(self, call: dict) -> List[dict]:
        out = self._close()
        try:
            arguments = json.loads(call.get("arguments") or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            arguments = {}  # contract 1 promises an object; never hand a client anything else
        block = {"type": "tool_use", "id": tool_use_id(call["id"]), "name": call["name"], "input": arguments}
        self.content.append(block)
        index = len(self.content) - 1
        out.append({"type": "content_block_start", "index": index, "content_block": dict(block, input={})})
        out.append(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {
                    "type": "input_json_delta",
                    "partial_json": json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
        out.append({"type": "content_block_stop", "index": index})
        return out

    def _finish(self, finish: str, usage: Optional[dict]) -> List[dict]:
        if any(b["type"] == "tool_use" for b in self.content):
            self.stop_reason = "tool_use"
        elif self.stop_sequence is not None:
            self.stop_reason = "stop_sequence"
        else:
            self.stop_reason = STOP_REASONS.get(finish, "end_turn")
        self.usage = usage_body(usage)
        return [
            {
                "type": "message_delta",
                "delta": {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence},
                "usage": dict(self.usage),
            },
            {"type": "message_stop"},
        ]
