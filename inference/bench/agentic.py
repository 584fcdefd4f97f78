"""The agentic scenario: the load of a coding agent, many multi-turn conversations that share a
long system prompt with tool definitions (``agentic_prompts``).

How requests arrive, ``mode`` (in both, a conversation's next turn starts only after its
previous answer ended):
- ``closed`` (the default): ``burst`` clients (C requests in flight). Each takes the next
  conversation not yet started (in order), sends its turns one after the other, each as soon as
  its own previous answer has ended (streamed chat completions), then takes the next one. No
  client waits for another's answer, so arrivals follow the target's answers: an agent's loop.
- ``burst``: the requests of the run are ordered turn by turn (turn 1 of every conversation,
  then turn 2, ...). A burst takes the first ``burst`` requests of that order whose
  conversation is not already in the burst, sends them all at once, and the next burst is sent
  when every answer of this one has ended: requests arrive ``burst`` at a time, the same
  pattern whatever the target's speed.

A conversation's history grows by the answer as the target returned it: after turn t its
messages are the ones sent for turn t, the assistant message (the answer's text, and its tool
calls where a server parsed some), then the user message of turn t+1. A request that fails ends
its conversation (its later turns are counted as skipped).

What is reported (``run_agentic`` returns plain data, ``AGENTIC_RESULTS_VERSION``):
- ``summary``: TTFT p50/p95/p99 over all requests; request latency p50/p95/p99 (request sent to
  its last token); inter-token latency p50/p95/p99 over every gap between two successive pieces
  of output of a stream, pooled; output tokens/s = all completion tokens / the run's wall time
  (first request sent to last token); prompt tokens in all, cached (reused) tokens as the target
  reported them (None when it reported none: "n/a"), computed = prompt - cached; hot / cold
  cached tokens where the target tells the tiers apart (the local engine); ``phases_s``, where
  the local engine says it: the mean seconds per request spent queued, restoring cached KV, in
  prefill forward passes, admitted but waiting for other work (other prompts' chunks, decode
  steps) before the first token, and decoding.
- ``turns``: per turn, prompt and cached tokens, the growth of the prompt over the previous turn
  of the same conversation, TTFT.
- ``requests``: per request, in the order they were collected: who sent it (``burst`` or
  ``client``, 1-based, the other None), where its time went (sent at, TTFT, decode time, ended
  at, latency) and its tokens.
- ``speculative``: what the target's speculative decoding counters did over the run's requests
  (``speculation.difference``: drafted and accepted tokens, verify passes, acceptance, tokens per
  pass), None where the target has no counters; ``settings.speculative`` is the method every
  request asked for (None: the model's own setting).
"""

from __future__ import annotations

import datetime as dt
import random
import secrets
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, fields
from typing import Callable, Dict, List, Optional

from .agentic_prompts import PromptBook
from .speculation import METHODS, difference
from .stats import summary
from .targets import StreamResult, Target, TargetError

AGENTIC_RESULTS_VERSION = 3  # 2: mode, client, ended_s, latency_s; 3: speculative
_MAX_ERRORS_KEPT = 10
Progress = Callable[[int, int, str, dict], None]


@dataclass(frozen=True)
class AgenticSettings:
    """One agentic run (see the module docstring); sizes are in the target's tokens.

    conversations x turns requests; system_tokens: the shared system prompt with the tool
    definitions; context_tokens: each conversation's own context (in its first user message);
    new_tokens: the new user text of every turn; gen_tokens: tokens generated per turn (exactly,
    with ignore_eos where the target knows it); gen_spread: closed loop only, turn t of
    conversation c generates ``gen_tokens_of(c, t)`` tokens instead, gen_tokens plus an offset
    in [-gen_spread, gen_spread] drawn from (c, t) alone (every run and target gets the same
    lengths): answers of equal lengths let the arrivals fall into a rotation that answers of
    varied lengths, like an agent's, do not keep; burst: requests in flight (closed: clients;
    burst: requests sent at once); mode: ``closed`` or ``burst``; speculative: the speculative
    decoding method every request asks for (off, lookup, suffix, draft; None: the model's setting).
    """

    conversations: int = 12
    turns: int = 3
    system_tokens: int = 1024
    context_tokens: int = 128
    new_tokens: int = 64
    gen_tokens: int = 32
    gen_spread: int = 0
    burst: int = 4
    ignore_eos: bool = True
    mode: str = "closed"
    speculative: Optional[str] = None

    MODES = ("closed", "burst")

    LIMITS = {
        "conversations": (1, 1000),
        "turns": (1, 100),
        "system_tokens": (16, 1_000_000),
        "context_tokens": (1, 1_000_000),
        "new_tokens": (1, 1_000_000),
        "gen_tokens": (1, 100_000),
        "gen_spread": (0, 99_999),
        "burst": (1, 256),
    }

    def __post_init__(self):
        for name, (low, high) in self.LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name}={value!r}: must be an integer in [{low}, {high}]")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError("ignore_eos must be true or false")
        if self.mode not in self.MODES:
            raise ValueError(f"mode={self.mode!r}: must be one of {', '.join(self.MODES)}")
        if self.gen_spread and (self.mode != "closed" or self.gen_spread >= self.gen_tokens):
            raise ValueError("gen_spread: the closed loop's only, and below gen_tokens")
        if self.speculative is not None and self.speculative not in METHODS:
            raise ValueError(f"speculative={self.speculative!r}: must be one of {', '.join(METHODS)}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "AgenticSettings":
        """From plain data (JSON); ValueError for unknown keys or bad values."""
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown agentic settings: {', '.join(unknown)}")
        return cls(**values)

    def gen_tokens_of(self, conversation: int, turn: int) -> int:
        """Tokens generated by turn ``turn`` of conversation ``conversation`` (``gen_spread``)."""
        if not self.gen_spread:
            return self.gen_tokens
        offset = random.Random(conversation * 1_000_003 + turn).randint(-self.gen_spread, self.gen_spread)
        return self.gen_tokens + offset

    def arrival(self) -> str:
        """How the requests arrive, in words (for a report's header)."""
        if self.mode == "closed":
            return f"closed loop: {self.burst} clients, each sending its next turn when its own answer ends"
        return f"bursts of {self.burst}: the next burst when all have answered"

    def total_steps(self) -> int:
        """Progress steps: calibration, then one per burst (burst) or per request (closed)."""
        if self.mode == "closed":
            return 1 + self.conversations * self.turns
        return 1 + len(plan_bursts(self.conversations, self.turns, self.burst))


AGENTIC_PRESETS: Dict[str, AgenticSettings] = {
    # a quick look (and the tests)
    "small": AgenticSettings(
        conversations=3, turns=2, system_tokens=64, context_tokens=16, new_tokens=16, gen_tokens=8, burst=2
    ),
    # the load of issues 12 and 24: a Qwen2.5-0.5B-sized agent, 12 conversations x 3 turns, 4 in
    # flight (issue 12 measured it with mode="burst")
    "default": AgenticSettings(),
}


def plan_bursts(conversations: int, turns: int, burst: int) -> List[List[tuple]]:
    """The bursts of a run: lists of (conversation, turn), 0-based (see the module docstring)."""
    pending = [(c, t) for t in range(turns) for c in range(conversations)]
    bursts = []
    while pending:
        chosen, used = [], set()
        for item in pending:
            if len(chosen) == burst:
                break
            if item[0] not in used:
                chosen.append(item)
                used.add(item[0])
        bursts.append(chosen)
        pending = [item for item in pending if item not in chosen]
    return bursts


def _iso_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _assistant(result: StreamResult) -> dict:
    message = {"role": "assistant", "content": result.text}
    if result.tool_calls:
        message["tool_calls"] = [
            dict(call, id=call["id"] or f"call_{i}") for i, call in enumerate(result.tool_calls)
        ]
    return message


def _request_row(
    conversation: int,
    turn: int,
    burst: Optional[int],
    client: Optional[int],
    result: StreamResult,
    started: float,
    previous_prompt: Optional[int],
) -> dict:
    ok = result.error is None and result.ttft is not None
    decode = result.token_times[-1] - result.token_times[0] if ok else None
    ended = result.ended_at - started if ok else None
    return {
        "conversation": conversation + 1,
        "turn": turn + 1,
        "burst": None if burst is None else burst + 1,
        "client": None if client is None else client + 1,
        "sent_s": result.sent_at - started,
        "ttft_s": result.ttft,
        "decode_s": decode,
        "ended_s": ended,
        "latency_s": result.ended_at - result.sent_at if ok else None,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "cached_tokens": result.cached_tokens if result.cached_known else None,
        "computed_tokens": result.prompt_tokens - result.cached_tokens if result.cached_known else None,
        "hot_cached_tokens": result.hot_cached_tokens,
        "cold_cached_tokens": result.cold_cached_tokens,
        "prompt_growth": result.prompt_tokens - previous_prompt if ok and previous_prompt else None,
        "timings": result.timings,
        "error": result.error,
    }


def _total(rows: List[dict], key: str) -> Optional[int]:
    """The sum of ``key`` over ``rows``; None when a row has no value (the target did not say)."""
    values = [r[key] for r in rows]
    return sum(values) if values and all(v is not None for v in values) else None


def _summary(rows: List[dict], gaps: List[float], span: Optional[float], settings: AgenticSettings) -> dict:
    ok = [r for r in rows if r["error"] is None]
    output = sum(r["completion_tokens"] for r in ok)
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = _total(ok, "cached_tokens")
    return {
        "requests": settings.conversations * settings.turns,
        "sent": len(rows),
        "ok": len(ok),
        "errors": len(rows) - len(ok),
        "skipped": settings.conversations * settings.turns - len(rows),
        "ttft_s": summary(r["ttft_s"] for r in ok),
        "latency_s": summary(r["latency_s"] for r in ok),
        "itl_s": summary(gaps),
        "output_tokens": output,
        "wall_s": span,
        "output_tokens_per_s": output / span if span else None,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "computed_tokens": prompt - cached if cached is not None else None,
        "reused_share": cached / prompt if cached is not None and prompt else None,
        "hot_cached_tokens": _total(ok, "hot_cached_tokens"),
        "cold_cached_tokens": _total(ok, "cold_cached_tokens"),
        "phases_s": _phases(ok),
    }


def _phases(rows: List[dict]) -> Optional[dict]:
    """Mean seconds per request in each phase of the engine (``Request.timings``); None when the
    target did not say (a server other than the in-process engine)."""
    timed = [r["timings"] for r in rows if r.get("timings")]
    if not timed or len(timed) < len(rows):
        return None
    return {phase: sum(t[phase] for t in timed) / len(timed) for phase in timed[0]}


def _turn_rows(rows: List[dict], turns: int) -> List[dict]:
    out = []
    for turn in range(1, turns + 1):
        ok = [r for r in rows if r["turn"] == turn and r["error"] is None]
        cached = [r["cached_tokens"] for r in ok]
        out.append(
            {
                "turn": turn,
                "requests": len([r for r in rows if r["turn"] == turn]),
                "ok": len(ok),
                "prompt_tokens": summary(r["prompt_tokens"] for r in ok),
                "cached_tokens": summary(cached) if cached and None not in cached else None,
                "prompt_growth": summary(r["prompt_growth"] for r in ok),
                "completion_tokens": sum(r["completion_tokens"] for r in ok),
                "ttft_s": summary(r["ttft_s"] for r in ok),
            }
        )
    return out


def empty_results(target: dict, settings: AgenticSettings) -> dict:
    return {
        "version": AGENTIC_RESULTS_VERSION,
        "scenario": "agentic",
        "target": target,
        "settings": settings.to_dict(),
        "started_at": _iso_now(),
        "finished_at": None,
        "duration_s": None,
        "prompts": None,
        "summary": None,
        "turns": [],
        "requests": [],
        "speculative": None,
        "errors": [],
    }


class _Run:
    """The state of one run that both arrival modes share: every conversation's history, the
    request rows, the pooled inter-token gaps. ``record`` takes one answer (under a lock: in the
    closed loop the clients' threads call it) and says whether the conversation goes on."""

    def __init__(
        self,
        target: Target,
        settings: AgenticSettings,
        book: PromptBook,
        results: dict,
        progress: Optional[Progress],
        total: int,
    ):
        self.target, self.settings, self.book, self.results = target, settings, book, results
        self.progress, self.total, self.steps = progress, total, 1
        self.histories = [
            [book.system_message(), book.user_message(c, 0)] for c in range(settings.conversations)
        ]
        self.failed, self.last_prompt = set(), {}
        self.rows, self.gaps = [], []
        self.first_sent = self.last_token = None
        self.lock = threading.Lock()
        self.started = time.perf_counter()  # request rows' sent_s and ended_s count from here

    def send(self, conversations: List[int], turn: int = 0) -> List[StreamResult]:
        """The next turn of every conversation in ``conversations``, sent at once (``turn``: the
        turn of a single one, for ``gen_spread``)."""
        with self.lock:
            messages = [list(self.histories[c]) for c in conversations]
        if not messages:
            return []
        s = self.settings
        tokens = s.gen_tokens_of(conversations[0], turn) if len(messages) == 1 else s.gen_tokens
        return self.target.chat(messages, tokens, s.ignore_eos)

    def record(
        self, c: int, t: int, result: StreamResult, burst: Optional[int] = None, client: Optional[int] = None
    ) -> bool:
        with self.lock:
            self.rows.append(_request_row(c, t, burst, client, result, self.started, self.last_prompt.get(c)))
            if result.error is not None:
                self.failed.add(c)
                errors = self.results["errors"]
                if len(errors) < _MAX_ERRORS_KEPT and result.error not in errors:
                    errors.append(result.error)
                return False
            self.last_prompt[c] = result.prompt_tokens
            self.gaps += [b - a for a, b in zip(result.token_times, result.token_times[1:])]
            self.first_sent = min(self.first_sent or result.sent_at, result.sent_at)
            self.last_token = max(self.last_token or result.ended_at, result.ended_at)
            self.histories[c].append(_assistant(result))
            if t + 1 < self.settings.turns:
                self.histories[c].append(self.book.user_message(c, t + 1))
            return True

    def step(self, message: Optional[str] = None) -> None:
        """The results so far, to the progress callback (``message`` None: "request k/n")."""
        with self.lock:
            span = self.last_token - self.first_sent if self.first_sent is not None else None
            self.results["requests"] = self.rows
            self.results["summary"] = _summary(self.rows, self.gaps, span, self.settings)
            self.results["turns"] = _turn_rows(self.rows, self.settings.turns)
            self.steps += 1
            if self.progress is not None:
                message = message or f"request {self.steps - 1}/{self.total - 1}"
                self.progress(self.steps, self.total, message, self.results)


def _run_bursts(run: _Run) -> None:
    bursts = plan_bursts(run.settings.conversations, run.settings.turns, run.settings.burst)
    for b, burst in enumerate(bursts):
        burst = [(c, t) for c, t in burst if c not in run.failed]
        for (c, t), result in zip(burst, run.send([c for c, _ in burst])):
            run.record(c, t, result, burst=b)
        run.step(f"burst {b + 1}/{len(bursts)}")


def _run_closed(run: _Run) -> None:
    """``burst`` clients, each its conversations' turns back to back (the module docstring)."""
    waiting = deque(range(run.settings.conversations))
    failures = []

    def client(i: int) -> None:
        try:
            while True:
                with run.lock:
                    if not waiting:
                        return
                    c = waiting.popleft()
                for t in range(run.settings.turns):
                    going_on = run.record(c, t, run.send([c], t)[0], client=i)
                    run.step()
                    if not going_on:
                        break
        except BaseException as exc:  # noqa: BLE001  (raised again in the caller's thread)
            failures.append(exc)

    threads = [
        threading.Thread(target=client, args=(i,), name=f"omlx-bench-client-{i + 1}", daemon=True)
        for i in range(min(run.settings.burst, run.settings.conversations))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def run_agentic(
    target: Target,
    settings: AgenticSettings,
    progress: Optional[Progress] = None,
    transcripts: Optional[list] = None,
) -> dict:
    """Run the agentic scenario against ``target``; TargetError when calibration or the warm-up
    request fails (the target cannot serve at all). Errors of single requests are counted.
    ``transcripts``, when given, receives every conversation's messages (the last answer
    included) as sent and answered. ``target.speculative`` is ``settings.speculative`` for the
    run (set back afterwards)."""
    kept, target.speculative = target.speculative, settings.speculative
    try:
        return _run_agentic(target, settings, progress, transcripts)
    finally:
        target.speculative = kept


def _run_agentic(target: Target, settings: AgenticSettings, progress, transcripts) -> dict:
    results = empty_results(target.describe(), settings)
    started_run = time.perf_counter()
    total = settings.total_steps()
    if progress is not None:
        progress(0, total, "calibrating the prompts", results)
    book = PromptBook.calibrate(
        target.count_chat_tokens, settings.system_tokens, settings.context_tokens, settings.new_tokens
    )
    hello = [{"role": "user", "content": f"{secrets.token_hex(4)} hello"}]
    warm = target.chat([hello], 2, settings.ignore_eos)
    if warm[0].error is not None:
        raise TargetError(warm[0].error)
    results["prompts"] = dict(asdict(book.sizes), system_chars=len(book.system))
    if progress is not None:
        progress(1, total, "calibrated", results)
    run = _Run(target, settings, book, results, progress, total)
    before = target.speculative_counters()  # after the warm-up: the run's requests only
    (_run_closed if settings.mode == "closed" else _run_bursts)(run)
    results["speculative"] = difference(before, target.speculative_counters(), settings.speculative)
    if transcripts is not None:
        transcripts.extend(run.histories)
    results["finished_at"] = _iso_now()
    results["duration_s"] = time.perf_counter() - started_run
    return results
