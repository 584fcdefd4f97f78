"""What a benchmark runs against: one interface, three places.

``Target.generate(prompts, max_tokens, ignore_eos)`` starts every prompt at once (that is the
concurrency) and returns one ``StreamResult`` per prompt when all have ended: when each token
arrived, and the server's own token counts. ``Target.chat(conversations, ...)`` does the same
for lists of chat messages (the agentic scenario), keeping each answer's text;
``Target.count_chat_tokens(messages)`` is the prompt size of a conversation as the target counts
it (rendered locally, or one request with max_tokens 1).

- ``EngineTarget``: an ``inference.engine.Engine`` of this process, fed through ``submit``
  with a callback (timestamps taken on the engine thread as each token is published).
  ``EngineTarget.from_folder`` builds an engine from a model folder with the settings it is
  given (`omlx bench MODEL` passes `omlx serve`'s cache settings); ``PoolTarget`` leases a model
  of this process's model pool (the admin page's benchmark, a Huey task inside the server or
  `omlx worker`).
- ``OpenAITarget``: any OpenAI-compatible server, over streamed ``/v1/completions`` (text in,
  text out: no chat template between the prompt and its token count).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional
from urllib.parse import urlsplit, urlunsplit

from .speculation import read_metrics


class TargetError(Exception):
    """The target cannot be benchmarked at all (unreachable, refused the key, unknown model)."""


@dataclass
class StreamResult:
    """One streamed request. Times are ``time.perf_counter()`` values of this process.

    ``token_times`` holds the arrival time of every piece of output (one per token for the
    engine, one per non-empty text chunk for a server); the first is the first token's.
    ``cached_known`` is False when the target did not report cached tokens (``cached_tokens``
    is then 0); ``hot_cached_tokens`` / ``cold_cached_tokens`` are None unless the target says
    which tier they came from (the engine does), and ``timings`` unless it says where the
    request's time went (the engine does: queue, restore, prefill, prefill_wait, decode). ``text``
    and ``tool_calls`` are the answer as returned (chat requests; tool calls in OpenAI's form, only
    where a server parsed some).
    """

    sent_at: float
    token_times: List[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cached_known: bool = False
    hot_cached_tokens: Optional[int] = None
    cold_cached_tokens: Optional[int] = None
    text: str = ""
    tool_calls: List[dict] = field(default_factory=list)
    error: Optional[str] = None
    timings: Optional[dict] = None  # the engine's phases of the request (``Request.timings``)

    @property
    def ttft(self) -> Optional[float]:
        """Seconds from sending the request to its first token."""
        return self.token_times[0] - self.sent_at if self.token_times and self.error is None else None

    @property
    def decode_tokens_per_s(self) -> Optional[float]:
        """Tokens after the first, over the time from the first token to the last."""
        if self.error is not None or len(self.token_times) < 2 or self.completion_tokens < 2:
            return None
        span = self.token_times[-1] - self.token_times[0]
        return (self.completion_tokens - 1) / span if span > 0 else None

    @property
    def ended_at(self) -> Optional[float]:
        return self.token_times[-1] if self.token_times else None


class Target:
    """Something that generates: see the module docstring."""

    kind = "target"
    speculative: Optional[str] = None  # speculative decoding sent with every request; None: the model's

    def describe(self) -> dict:
        """Plain data naming the target (kept with the results)."""
        raise NotImplementedError

    def generate(
        self, prompts: List[str], max_tokens: int, ignore_eos: bool = True, stop: Optional[List[str]] = None
    ) -> List[StreamResult]:
        """Every prompt at once, greedy; generation ends at any of ``stop`` (not included)."""
        raise NotImplementedError

    def chat(
        self, conversations: List[List[dict]], max_tokens: int, ignore_eos: bool = True
    ) -> List[StreamResult]:
        """Every conversation (OpenAI chat messages) sent at once, as ``generate``."""
        raise NotImplementedError

    def count_chat_tokens(self, messages: List[dict]) -> int:
        """The prompt tokens of ``messages`` with the generation prompt; TargetError if the
        target cannot say."""
        raise NotImplementedError

    def speculative_counters(self) -> Optional[dict]:
        return None  # the model's speculative counters now (speculation.COUNTERS); None: unknown

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class EngineTarget(Target):
    """An engine of this process (not owned unless built by ``from_folder``)."""

    kind = "local"
    TIMEOUT = 600.0  # seconds one batch may take before its requests are aborted

    def __init__(self, engine, model: str, owned: bool = False):
        self.engine = engine
        self.model = model
        self._owned = owned

    @classmethod
    def from_folder(cls, path, model: Optional[str], settings: dict) -> "EngineTarget":
        """An engine for the model folder ``path`` with ``settings`` (EngineConfig fields; the
        CLI passes `omlx serve`'s cache settings). ModelLoadError when it cannot load."""
        from inference.engine import Engine

        path = Path(path).expanduser()
        return cls(Engine(path, **settings), model or path.name, owned=True)

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "model": self.model,
            "url": None,
            "path": str(self.engine.loaded.path) if self.engine.loaded else None,
        }

    def generate(
        self, prompts: List[str], max_tokens: int, ignore_eos: bool = True, stop: Optional[List[str]] = None
    ) -> List[StreamResult]:
        return self._run(prompts, max_tokens, ignore_eos, stop)

    def chat(
        self, conversations: List[List[dict]], max_tokens: int, ignore_eos: bool = True
    ) -> List[StreamResult]:
        prompts, errors = [], []
        for messages in conversations:
            try:
                prompts.append(self._chat_ids(messages))
                errors.append(None)
            except Exception as exc:  # whatever the template raises for input it rejects
                prompts.append(None)
                errors.append(f"the chat template failed: {exc}")
        results = self._run([p for p in prompts if p is not None], max_tokens, ignore_eos)
        out = iter(results)
        return [
            next(out) if error is None else StreamResult(time.perf_counter(), error=error) for error in errors
        ]

    def count_chat_tokens(self, messages: List[dict]) -> int:
        try:
            return len(self._chat_ids(messages))
        except Exception as exc:
            raise TargetError(f"the chat template failed: {exc}") from None

    def _chat_ids(self, messages: List[dict]) -> List[int]:
        """The token ids `omlx serve` would prefill for these messages (inference.generation's
        chat_prompt: the model's template, encoded without added special tokens)."""
        from inference.chat.template import render_prompt

        tokenizer = self.engine.tokenizer
        return list(tokenizer.encode(render_prompt(tokenizer, messages), add_special_tokens=False))

    def _run(self, prompts: list, max_tokens: int, ignore_eos: bool, stop=None) -> List[StreamResult]:
        from inference.engine import SamplingParams

        spec = self.speculative
        params = SamplingParams(
            max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos, stop=stop, speculative=spec
        )
        results, done, ids = [], [], []
        for prompt in prompts:
            result = StreamResult(time.perf_counter())
            ended = threading.Event()
            results.append(result)
            done.append(ended)
            try:
                stream = self.engine.submit(prompt, params, callback=self._sink(result, ended))
                ids.append(stream.request_id)
            except (ValueError, RuntimeError) as exc:
                result.error = str(exc)
                ended.set()
        deadline = time.monotonic() + self.TIMEOUT
        for ended in done:
            if not ended.wait(max(0.0, deadline - time.monotonic())):
                for request_id in ids:
                    self.engine.abort(request_id)
                for result, ended_too in zip(results, done):
                    if not ended_too.wait(10) and result.error is None:
                        result.error = f"no answer within {self.TIMEOUT:.0f} s"
                break
        return results

    def speculative_counters(self) -> Optional[dict]:
        return dict(self.engine.stats().speculative) or None

    @staticmethod
    def _sink(result: StreamResult, ended: threading.Event):
        def on_event(event) -> None:  # on the engine thread
            now = time.perf_counter()
            if event.token_ids:
                result.token_times.extend([now] * len(event.token_ids))
            result.text += event.text
            if event.finish_reason is None:
                return
            if event.finish_reason in ("abort", "error"):
                result.error = event.error or f"the request ended: {event.finish_reason}"
            if event.usage is not None:
                result.prompt_tokens = event.usage.prompt_tokens
                result.completion_tokens = event.usage.completion_tokens
                result.cached_tokens = event.usage.cached_tokens
                result.cached_known = True
                result.hot_cached_tokens = event.usage.hot_cached_tokens
                result.cold_cached_tokens = event.usage.cold_cached_tokens
                result.timings = event.usage.timings
            ended.set()

        return on_event

    def close(self) -> None:
        if self._owned:
            self.engine.close()


class PoolTarget(EngineTarget):
    """A model of this process's model pool (``inference.pool.get_pool()``), leased for as long
    as the target is open so the pool does not unload it mid-run. KeyError for an unknown
    model; the pool's own errors (InsufficientMemory, ModelLoadError) when it cannot load."""

    def __init__(self, model: str):
        from inference.pool import get_pool

        self._lease = get_pool().lease(model)
        super().__init__(self._lease.__enter__(), model)

    def close(self) -> None:
        if self._lease is not None:
            self._lease.__exit__(None, None, None)
            self._lease = None


def api_base(url: str) -> str:
    """The API base of an OpenAI-compatible server: ``http://host:port`` gets ``/v1``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TargetError(f"{url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class OpenAITarget(Target):
    """An OpenAI-compatible server at ``url`` (its API base, e.g. http://127.0.0.1:8000/v1).

    Requests are streamed ``/completions`` (or ``/chat/completions`` with ``endpoint="chat"``: the
    prompt as one user message, for servers without text completions; the chat template's tokens
    are then part of every prompt) with ``stream_options.include_usage`` (token counts,
    ``usage.prompt_tokens_details.cached_tokens`` where the server reports it) and temperature 0.
    ``ignore_eos`` is sent as an extra body field: servers that know it (omlx, vLLM) generate
    exactly ``max_tokens``; others ignore it and may stop early, and the decode speed counts the
    tokens they did generate (``completion_tokens``). ``extra_body`` is merged into every
    request (e.g. mlx-lm's ``logit_bias`` against the end-of-sequence tokens, which has the
    effect of ignore_eos there). ``chat`` sends whole conversations to ``/chat/completions``.
    """

    kind = "url"

    ENDPOINTS = ("completions", "chat")

    def __init__(
        self,
        url: str,
        model: str,
        api_key: Optional[str] = None,
        timeout: float = 600.0,
        endpoint: str = "completions",
        extra_body: Optional[dict] = None,
    ):
        import httpx

        if endpoint not in self.ENDPOINTS:
            raise TargetError(f"endpoint {endpoint!r}: must be completions or chat")
        self.url = api_base(url)
        self.model = model
        self.endpoint = endpoint
        self.extra_body = dict(extra_body or {})
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "model": self.model,
            "url": self.url,
            "path": None,
            "endpoint": self.endpoint,
        }

    def check(self) -> None:
        """TargetError when nothing answers at the URL or the server refuses the key."""
        import httpx

        try:
            response = self.client.get(f"{self.url}/models", headers=self.headers, timeout=10.0)
        except httpx.HTTPError as exc:
            raise TargetError(f"nothing answers at {self.url}: {exc}") from None
        if response.status_code in (401, 403):
            raise TargetError(
                f"the server at {self.url} refused the API key (HTTP {response.status_code}"
                f"{': ' + _message(response) if _message(response) else ''})"
            )

    def generate(
        self, prompts: List[str], max_tokens: int, ignore_eos: bool = True, stop: Optional[List[str]] = None
    ) -> List[StreamResult]:
        if self.endpoint == "chat":
            bodies = [
                self._body([{"role": "user", "content": p}], None, max_tokens, ignore_eos) for p in prompts
            ]
        else:
            bodies = [self._body(None, prompt, max_tokens, ignore_eos) for prompt in prompts]
        if stop:
            for body in bodies:
                body["stop"] = list(stop)
        return self._all(bodies)

    def chat(
        self, conversations: List[List[dict]], max_tokens: int, ignore_eos: bool = True
    ) -> List[StreamResult]:
        return self._all([self._body(messages, None, max_tokens, ignore_eos) for messages in conversations])

    def count_chat_tokens(self, messages: List[dict]) -> int:
        import httpx

        body = dict(self._body(messages, None, 1, False), stream=False)
        body.pop("stream_options")
        try:
            response = self.client.post(self.url + "/chat/completions", json=body, headers=self.headers)
        except httpx.HTTPError as exc:
            raise TargetError(f"{type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise TargetError(f"HTTP {response.status_code}: {_message(response) or response.reason_phrase}")
        try:
            tokens = response.json()["usage"]["prompt_tokens"]
        except (ValueError, KeyError, TypeError):
            tokens = None
        if not isinstance(tokens, int) or tokens <= 0:
            raise TargetError(f"the server at {self.url} reports no usage.prompt_tokens")
        return tokens

    def _body(
        self, messages: Optional[List[dict]], prompt: Optional[str], max_tokens: int, ignore_eos: bool
    ) -> dict:
        body = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if messages is not None:
            body["messages"] = messages
        else:
            body["prompt"] = prompt
        if ignore_eos:
            body["ignore_eos"] = True
        if self.speculative is not None:
            body["speculative"] = {"method": self.speculative}
        body.update(self.extra_body)
        return body

    def _all(self, bodies: List[dict]) -> List[StreamResult]:
        results = [StreamResult(0.0) for _ in bodies]
        threads = [
            threading.Thread(target=self._one, args=(body, result), name="omlx-bench-request", daemon=True)
            for body, result in zip(bodies, results)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    def _one(self, body: dict, result: StreamResult) -> None:
        import httpx

        path = "/chat/completions" if "messages" in body else "/completions"
        result.sent_at = time.perf_counter()
        try:
            with self.client.stream("POST", self.url + path, json=body, headers=self.headers) as response:
                if response.status_code != 200:
                    response.read()
                    result.error = (
                        f"HTTP {response.status_code}: {_message(response) or response.reason_phrase}"
                    )
                    return
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    self._chunk(json.loads(data), result)
                    if result.error is not None:
                        return
        except (httpx.HTTPError, ValueError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            return
        if not result.token_times and result.error is None:
            result.error = "the stream ended without any output"

    @staticmethod
    def _chunk(chunk: dict, result: StreamResult) -> None:
        now = time.perf_counter()
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            error = chunk["error"]
            result.error = error.get("message") if isinstance(error, dict) else str(error)
            return
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = choice.get("text") or delta.get("content")
            calls = delta.get("tool_calls")
            if text or calls or delta.get("reasoning_content") or delta.get("reasoning"):
                result.token_times.append(now)
            if text:
                result.text += text
            for call in calls or []:
                _merge_call(result.tool_calls, call)
            break
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            result.prompt_tokens = usage.get("prompt_tokens") or 0
            result.completion_tokens = usage.get("completion_tokens") or 0
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                result.cached_tokens = details["cached_tokens"]
                result.cached_known = True

    def speculative_counters(self) -> Optional[dict]:  # omlx's /metrics; None from other servers
        return read_metrics(self.client, self.url, self.headers, self.model)

    def close(self) -> None:
        self.client.close()


def _merge_call(calls: List[dict], delta: dict) -> None:
    """Add a streamed tool call delta to ``calls`` (OpenAI's form: the first delta of a call
    has its id and name, the next ones more of its arguments, matched by ``index``)."""
    if not isinstance(delta, dict):
        return
    index = delta.get("index", len(calls))
    while len(calls) <= index:
        calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    call = calls[index]
    call["id"] = delta.get("id") or call["id"]
    function = delta.get("function") or {}
    call["function"]["name"] += function.get("name") or ""
    call["function"]["arguments"] += function.get("arguments") or ""


def _message(response) -> str:
    """The error message of an error response's JSON body (OpenAI's or a plain one)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200].strip()
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message")))
        if isinstance(error, dict):
            return str(error.get("message") or error)
        if error is not None:
            return str(error)
    return str(body)[:200]
