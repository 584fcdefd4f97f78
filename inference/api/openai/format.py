"""OpenAI's response bodies and stream chunks, built from generation events
(``inference.generation``), for chat completions and text completions: the ``Formatter``s of
/v1/chat/completions and /v1/completions (``inference.api.common.stream``)."""

from __future__ import annotations

import json
import time
from typing import Dict, List, Optional, Union

from inference import lifecycle
from inference.api.common.errors import ApiError
from inference.api.common.stream import Formatter


def usage_body(usages: Dict[int, dict], n: int) -> dict:
    """Usage of a request from its choices' usages: each prompt counts once (choice i*n), output
    tokens of every choice count."""
    firsts = [u for i, u in usages.items() if i % n == 0]
    prompt = sum(u["prompt_tokens"] for u in firsts)
    completion = sum(u["completion_tokens"] for u in usages.values())
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(u["cached_tokens"] for u in firsts)},
    }


def finish_reason(reason: Optional[str]) -> Optional[str]:
    return reason if reason in (None, "stop", "length", "tool_calls") else "stop"


def tool_call_body(call: dict, index: Optional[int] = None) -> dict:
    """A tool call of a generation event in OpenAI's form (with ``index`` in stream deltas)."""
    body = {
        "id": call["id"],
        "type": "function",
        "function": {"name": call["name"], "arguments": call["arguments"]},
    }
    return body if index is None else {"index": index, **body}


def failure(event: dict) -> Optional[ApiError]:
    """The client's error for a choice that ended with "error" or "abort" (None: it did not)."""
    if event["finish_reason"] not in ("error", "abort"):
        return None
    if event["finish_reason"] == "abort" and lifecycle.shutting_down():  # omlx_site/shutdown.py
        return ApiError(
            503, "The server is shutting down; the request was aborted", code="server_shutting_down"
        )
    message = f"Generation failed: {event['error'] or event['finish_reason']}"
    return ApiError(event.get("status") or 500, message, code=event.get("code"))


class ChatFormat(Formatter):
    """Chat completion chunks (``data: {json}`` frames, ``: keep-alive`` comments, ``[DONE]``
    at the end) or the chat.completion body; ``choices`` is the job's choice count, ``n`` its
    choices per prompt (usage counts each prompt once)."""

    object = "chat.completion"
    delta_key = "delta"  # a chunk's new output: a delta object
    keepalive = ": keep-alive\n\n"  # an SSE comment: keeps proxies and clients waiting

    def __init__(
        self, response_id: str, model: str, choices: int = 1, n: int = 1, include_usage: bool = False
    ):
        self.id = response_id
        self.model = model
        self.created = int(time.time())
        self.n = n
        self.include_usage = include_usage
        self._calls: Dict[int, int] = {}  # choice index -> tool calls streamed so far
        self._pending = set(range(choices))
        self._usages: Dict[int, dict] = {}
        self._choices: Dict[int, dict] = {
            i: {
                "index": i,
                "text": "",
                "reasoning": "",
                "tool_calls": [],
                "logprobs": None,
                "finish_reason": None,
                "usage": None,
            }
            for i in range(choices)
        }

    @property
    def finished(self) -> bool:
        return self.failure is not None or not self._pending

    def start(self, accepted: dict) -> List[dict]:
        return self.start_chunks(len(self._choices))

    def feed(self, event: dict) -> List[dict]:
        if event["finish_reason"] is not None:
            self.failure = failure(event)
            if self.failure is not None:
                exc = self.failure
                return [
                    {"error": {"message": exc.message, "type": exc.type, "param": None, "code": exc.code}}
                ]
            self._usages[event["index"]] = event["usage"]
            self._pending.discard(event["index"])
        self._add(event)
        chunk = self.delta_chunk(event)
        return [] if chunk is None else [chunk]

    def _add(self, event: dict) -> None:
        """Every choice's events added up, for the body: {"index", "text", "reasoning",
        "tool_calls", "logprobs", "finish_reason", "usage"}."""
        choice = self._choices[event["index"]]
        choice["text"] += event["text"]
        choice["reasoning"] += event.get("reasoning") or ""
        choice["tool_calls"] += event.get("tool_calls") or []
        if event["logprobs"]:
            choice["logprobs"] = (choice["logprobs"] or []) + event["logprobs"]
        if event["finish_reason"] is not None:
            choice.update(finish_reason=event["finish_reason"], usage=event["usage"])

    def end(self) -> List[Union[dict, str]]:
        usage = [self.usage_chunk(usage_body(self._usages, self.n))] if self.include_usage else []
        return usage + ["[DONE]"]

    def frame(self, out: Union[dict, str]) -> str:
        return f"data: {out if isinstance(out, str) else json.dumps(out, separators=(',', ':'))}\n\n"

    def body(self) -> dict:
        choices = [self._choices[i] for i in sorted(self._choices)]
        return self.response(choices, usage_body({c["index"]: c["usage"] for c in choices}, self.n))

    def _head(self, obj: str) -> dict:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
        }

    def logprobs(self, entries: Optional[List[dict]]) -> Optional[dict]:
        if entries is None:
            return None
        return {
            "content": [
                {"token": e["token"], "logprob": e["logprob"], "bytes": e["bytes"], "top_logprobs": e["top"]}
                for e in entries
            ],
            "refusal": None,
        }

    def start_chunks(self, count: int) -> List[dict]:
        return [self.chunk(i, {"role": "assistant", "content": ""}) for i in range(count)]

    def chunk(self, index: int, delta, logprobs=None, reason=None) -> dict:
        """A stream chunk of one choice; ``delta`` is its new output (``delta_key``'s value)."""
        body = self._head("chat.completion.chunk")
        body["choices"] = [
            {
                "index": index,
                self.delta_key: delta,
                "logprobs": logprobs,
                "finish_reason": finish_reason(reason),
            }
        ]
        return body

    def delta_chunk(self, event: dict) -> Optional[dict]:
        reasoning, calls = event.get("reasoning"), event.get("tool_calls")
        if not (event["text"] or reasoning or calls or event["logprobs"] or event["finish_reason"]):
            return None
        delta = {}
        if reasoning:
            delta["reasoning_content"] = reasoning
        if event["text"]:
            delta["content"] = event["text"]
        if calls:
            first = self._calls.get(event["index"], 0)
            delta["tool_calls"] = [tool_call_body(call, first + k) for k, call in enumerate(calls)]
            self._calls[event["index"]] = first + len(calls)
        return self.chunk(event["index"], delta, self.logprobs(event["logprobs"]), event["finish_reason"])

    def usage_chunk(self, usage: dict) -> dict:
        body = self._head("chat.completion.chunk")
        body.update(choices=[], usage=usage)
        return body

    def response(self, choices: List[dict], usage: dict) -> dict:
        body = self._head("chat.completion")
        body["choices"] = [
            {
                "index": c["index"],
                "message": self.message(c),
                "logprobs": self.logprobs(c["logprobs"]),
                "finish_reason": finish_reason(c["finish_reason"]),
            }
            for c in choices
        ]
        body["usage"] = usage
        return body

    @staticmethod
    def message(choice: dict) -> dict:
        """The assistant message of a collected choice: content is null when the answer is only
        tool calls; reasoning_content is null when the model did not reason."""
        calls = choice.get("tool_calls") or []
        message = {
            "role": "assistant",
            "content": choice["text"] if choice["text"] or not calls else None,
            "refusal": None,
            "reasoning_content": choice.get("reasoning") or None,
        }
        if calls:
            message["tool_calls"] = [tool_call_body(call) for call in calls]
        return message


class CompletionFormat(ChatFormat):
    """text_completion chunks or body, as ChatFormat's."""

    delta_key = "text"  # a chunk's new output: text

    def __init__(
        self, response_id: str, model: str, choices: int = 1, n: int = 1, include_usage: bool = False
    ):
        super().__init__(response_id, model, choices, n, include_usage)
        self._offsets = {}

    def _head(self, obj: str) -> dict:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
        }

    def logprobs(self, entries: Optional[List[dict]], offset: int = 0) -> Optional[dict]:
        if entries is None:
            return None
        offsets = []
        for e in entries:
            offsets.append(offset)
            offset += len(e["token"])
        return {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [  # None for an echoed prompt's first token
                None if e["top"] is None else {t["token"]: t["logprob"] for t in e["top"]} for e in entries
            ],
            "text_offset": offsets,
        }

    def start_chunks(self, count: int) -> List[dict]:
        return []

    def delta_chunk(self, event: dict) -> Optional[dict]:
        if not event["text"] and not event["logprobs"] and event["finish_reason"] is None:
            return None
        index, entries = event["index"], event["logprobs"]
        offset = self._offsets.get(index, 0)  # text_offset counts from the start of the choice
        if entries:
            self._offsets[index] = offset + sum(len(e["token"]) for e in entries)
        return self.chunk(index, event["text"], self.logprobs(entries, offset), event["finish_reason"])

    def response(self, choices: List[dict], usage: dict) -> dict:
        body = self._head("text_completion")
        body["choices"] = [
            {
                "index": c["index"],
                "text": c["text"],
                "logprobs": self.logprobs(c["logprobs"]),
                "finish_reason": finish_reason(c["finish_reason"]),
            }
            for c in choices
        ]
        body["usage"] = usage
        return body
