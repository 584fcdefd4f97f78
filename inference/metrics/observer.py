"""Generation figures observed in the server process on each API request's subscription (so
they hold whichever process runs the model): time to first token, inter-token latency, tokens and
finish reasons."""

from __future__ import annotations

import time
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

from .definitions import (
    CACHED_PROMPT_TOKENS,
    GENERATION_TOKENS,
    GENERATIONS,
    ITL,
    PROMPT_TOKENS,
    REQUEST_PHASE,
    TTFT,
)
from .keys import KeyLabels, count_tokens

# Recent first-token times for the Status page's percentiles (histogram buckets are too coarse).
_recent_ttft: Deque[Tuple[float, float]] = deque(maxlen=20_000)  # (time.time(), seconds)


class GenerationObserver:
    """Times one API request from its hand-off: the first event with tokens (TTFT), the gaps
    between a choice's token events divided by their tokens (ITL), and the usage of each finished
    choice, also per API key (``key``: its labels, None for none). ``Subscription.receive`` calls
    ``observe`` for every event."""

    def __init__(self, model: str, n: int = 1, key: Optional[KeyLabels] = None):
        self.model = model  # until the worker's "accepted" names the model id
        self.n = n
        self.key = key
        self.started = time.perf_counter()
        self.accepted = False
        self._first = False
        self._last: Dict[int, float] = {}  # choice index -> time of its last token event

    def observe(self, event: dict) -> None:
        kind = event.get("kind")
        if kind == "accepted":
            self.accepted = True
            self.model = event.get("model") or self.model
            return
        if kind != "delta" or not self.accepted:
            return
        now = time.perf_counter()
        tokens = len(event.get("token_ids") or ())
        index = event.get("index", 0)
        if tokens:
            if not self._first:
                self._first = True
                TTFT.labels(self.model).observe(now - self.started)
                _recent_ttft.append((time.time(), now - self.started))
            last = self._last.get(index)
            if last is not None:
                ITL.labels(self.model).observe((now - last) / tokens)
            self._last[index] = now
        if event.get("finish_reason") is not None:
            GENERATIONS.labels(self.model, event["finish_reason"]).inc()
            usage = event.get("usage") or {}
            GENERATION_TOKENS.labels(self.model).inc(usage.get("completion_tokens") or 0)
            prompt = 0
            if index % self.n == 0:  # each prompt once, as the API's usage counts it
                prompt = usage.get("prompt_tokens") or 0
                PROMPT_TOKENS.labels(self.model).inc(prompt)
                CACHED_PROMPT_TOKENS.labels(self.model).inc(usage.get("cached_tokens") or 0)
            count_tokens(self.key, prompt, usage.get("completion_tokens") or 0)
            for phase, seconds in (usage.get("timings") or {}).items():
                REQUEST_PHASE.labels(self.model, phase).observe(seconds)


def recent_ttfts(since: float) -> List[float]:
    """First-token times (seconds) of requests whose first token came after ``since`` (time.time())."""
    return [seconds for at, seconds in list(_recent_ttft) if at > since]
