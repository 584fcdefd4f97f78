"""The agentic scenario: the load of a coding agent, many multi-turn conversations that share a
long system prompt with tool definitions (``agentic_prompts``).

How requests arrive (closed loop, in bursts): the requests of the run are ordered turn by turn
(turn 1 of every conversation, then turn 2, ...). A burst takes the first ``burst`` requests of
that order whose conversation is not already in the burst, sends them all at once (streamed chat
completions), and the next burst is sent when every answer of this one has ended. So requests
arrive ``burst`` at a time, a conversation's next turn always starts after its previous answer
ended, and every server gets the same arrival pattern whatever its speed.

A conversation's history grows by the answer as the target returned it: after turn t its
messages are the ones sent for turn t, the assistant message (the answer's text, and its tool
calls where a server parsed some), then the user message of turn t+1. A request that fails ends
its conversation (its later turns are counted as skipped).

What is reported (``run_agentic`` returns plain data, ``AGENTIC_RESULTS_VERSION``):
- ``summary``: TTFT p50/p95/p99 over all requests; inter-token latency p50/p95/p99 over every gap
  between two successive pieces of output of a stream, pooled; output tokens/s = all completion
  tokens / the run's wall time (first request sent to last token); prompt tokens in all, cached
  (reused) tokens as the target reported them (None when it reported none: "n/a"), computed =
  prompt - cached; hot / cold cached tokens where the target tells the tiers apart (the local
  engine); ``phases_s``, where the local engine says it: the mean seconds per request spent
  queued, restoring cached KV, in prefill forward passes, admitted but waiting for other work
  (other prompts' chunks, decode steps) before the first token, and decoding.
- ``turns``: per turn, prompt and cached tokens, the growth of the prompt over the previous turn
  of the same conversation, TTFT.
- ``requests``: per request, where its time went (sent at, TTFT, decode time) and its tokens.
"""
from __future__ import annotations

import datetime as dt
import secrets
import time
from dataclasses import asdict, dataclass, fields
from typing import Callable, Dict, List, Optional

from .agentic_prompts import PromptBook
from .stats import summary
from .targets import StreamResult, Target, TargetError

AGENTIC_RESULTS_VERSION = 1
_MAX_ERRORS_KEPT = 10
Progress = Callable[[int, int, str, dict], None]


@dataclass(frozen=True)
class AgenticSettings:
    """One agentic run (see the module docstring); sizes are in the target's tokens.

    conversations x turns requests; system_tokens: the shared system prompt with the tool
    definitions; context_tokens: each conversation's own context (in its first user message);
    new_tokens: the new user text of every turn; gen_tokens: tokens generated per turn (exactly,
    with ignore_eos where the target knows it); burst: requests sent at once.
    """

    conversations: int = 12
    turns: int = 3
    system_tokens: int = 1024
    context_tokens: int = 128
    new_tokens: int = 64
    gen_tokens: int = 32
    burst: int = 4
    ignore_eos: bool = True

    LIMITS = {"conversations": (1, 1000), "turns": (1, 100), "system_tokens": (16, 1_000_000),
              "context_tokens": (1, 1_000_000), "new_tokens": (1, 1_000_000), "gen_tokens": (1, 100_000),
              "burst": (1, 256)}

    def __post_init__(self):
        for name, (low, high) in self.LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name}={value!r}: must be an integer in [{low}, {high}]")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError("ignore_eos must be true or false")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "AgenticSettings":
        """From plain data (JSON); ValueError for unknown keys or bad values."""
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown agentic settings: {', '.join(unknown)}")
        return cls(**values)

    def total_steps(self) -> int:
        """Progress steps: calibration, then one per burst."""
        return 1 + len(plan_bursts(self.conversations, self.turns, self.burst))


AGENTIC_PRESETS: Dict[str, AgenticSettings] = {
    # a quick look (and the tests)
    "small": AgenticSettings(conversations=3, turns=2, system_tokens=64, context_tokens=16, new_tokens=16,
                             gen_tokens=8, burst=2),
    # the load of issue 12: a Qwen2.5-0.5B-sized agent, 12 conversations x 3 turns, 4 at a time
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
        message["tool_calls"] = [dict(call, id=call["id"] or f"call_{i}") for i, call in enumerate(result.tool_calls)]
    return message


def _request_row(conversation: int, turn: int, burst: int, result: StreamResult, started: float,
                 previous_prompt: Optional[int]) -> dict:
    ok = result.error is None and result.ttft is not None
    decode = result.token_times[-1] - result.token_times[0] if ok else None
    return {"conversation": conversation + 1, "turn": turn + 1, "burst": burst + 1,
            "sent_s": result.sent_at - started, "ttft_s": result.ttft, "decode_s": decode,
            "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "cached_tokens": result.cached_tokens if result.cached_known else None,
            "computed_tokens": result.prompt_tokens - result.cached_tokens if result.cached_known else None,
            "hot_cached_tokens": result.hot_cached_tokens, "cold_cached_tokens": result.cold_cached_tokens,
            "prompt_growth": result.prompt_tokens - previous_prompt if ok and previous_prompt else None,
            "timings": result.timings, "error": result.error}


def _total(rows: List[dict], key: str) -> Optional[int]:
    """The sum of ``key`` over ``rows``; None when a row has no value (the target did not say)."""
    values = [r[key] for r in rows]
    return sum(values) if values and all(v is not None for v in values) else None


def _summary(rows: List[dict], gaps: List[float], span: Optional[float], settings: AgenticSettings) -> dict:
    ok = [r for r in rows if r["error"] is None]
    output = sum(r["completion_tokens"] for r in ok)
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = _total(ok, "cached_tokens")
    return {"requests": settings.conversations * settings.turns, "sent": len(rows), "ok": len(ok),
            "errors": len(rows) - len(ok), "skipped": settings.conversations * settings.turns - len(rows),
            "ttft_s": summary(r["ttft_s"] for r in ok), "itl_s": summary(gaps),
            "output_tokens": output, "wall_s": span,
            "output_tokens_per_s": output / span if span else None,
            "prompt_tokens": prompt, "cached_tokens": cached,
            "computed_tokens": prompt - cached if cached is not None else None,
            "reused_share": cached / prompt if cached is not None and prompt else None,
            "hot_cached_tokens": _total(ok, "hot_cached_tokens"), "cold_cached_tokens": _total(ok, "cold_cached_tokens"),
            "phases_s": _phases(ok)}


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
        out.append({"turn": turn, "requests": len([r for r in rows if r["turn"] == turn]), "ok": len(ok),
                    "prompt_tokens": summary(r["prompt_tokens"] for r in ok),
                    "cached_tokens": summary(cached) if cached and None not in cached else None,
                    "prompt_growth": summary(r["prompt_growth"] for r in ok),
                    "completion_tokens": sum(r["completion_tokens"] for r in ok),
                    "ttft_s": summary(r["ttft_s"] for r in ok)})
    return out


def empty_results(target: dict, settings: AgenticSettings) -> dict:
    return {"version": AGENTIC_RESULTS_VERSION, "scenario": "agentic", "target": target,
            "settings": settings.to_dict(), "started_at": _iso_now(), "finished_at": None, "duration_s": None,
            "prompts": None, "summary": None, "turns": [], "requests": [], "errors": []}


def run_agentic(target: Target, settings: AgenticSettings, progress: Optional[Progress] = None,
                transcripts: Optional[list] = None) -> dict:
    """Run the agentic scenario against ``target``; TargetError when calibration or the warm-up
    request fails (the target cannot serve at all). Errors of single requests are counted.
    ``transcripts``, when given, receives every conversation's messages (the last answer
    included) as sent and answered."""
    results = empty_results(target.describe(), settings)
    started_run = time.perf_counter()
    bursts = plan_bursts(settings.conversations, settings.turns, settings.burst)
    total = 1 + len(bursts)
    if progress is not None:
        progress(0, total, "calibrating the prompts", results)
    book = PromptBook.calibrate(target.count_chat_tokens, settings.system_tokens, settings.context_tokens,
                                settings.new_tokens)
    warm = target.chat([[{"role": "user", "content": f"{secrets.token_hex(4)} hello"}]], 2, settings.ignore_eos)
    if warm[0].error is not None:
        raise TargetError(warm[0].error)
    results["prompts"] = dict(asdict(book.sizes), system_chars=len(book.system))
    if progress is not None:
        progress(1, total, "calibrated", results)

    histories = [[book.system_message(), book.user_message(c, 0)] for c in range(settings.conversations)]
    failed, last_prompt = set(), {}
    rows, gaps = [], []
    started = time.perf_counter()  # request rows' sent_s count from here
    first_sent = last_token = None
    for b, burst in enumerate(bursts):
        burst = [(c, t) for c, t in burst if c not in failed]
        answers = target.chat([list(histories[c]) for c, _ in burst], settings.gen_tokens,
                              settings.ignore_eos) if burst else []
        for (c, t), result in zip(burst, answers):
            rows.append(_request_row(c, t, b, result, started, last_prompt.get(c)))
            if result.error is not None:
                failed.add(c)
                if len(results["errors"]) < _MAX_ERRORS_KEPT and result.error not in results["errors"]:
                    results["errors"].append(result.error)
                continue
            last_prompt[c] = result.prompt_tokens
            gaps += [b2 - a for a, b2 in zip(result.token_times, result.token_times[1:])]
            first_sent = result.sent_at if first_sent is None else min(first_sent, result.sent_at)
            last_token = max(last_token or result.ended_at, result.ended_at)
            histories[c].append(_assistant(result))
            if t + 1 < settings.turns:
                histories[c].append(book.user_message(c, t + 1))
        span = last_token - first_sent if first_sent is not None else None
        results["requests"] = rows
        results["summary"] = _summary(rows, gaps, span, settings)
        results["turns"] = _turn_rows(rows, settings.turns)
        if progress is not None:
            progress(2 + b, total, f"burst {b + 1}/{len(bursts)}", results)
    if transcripts is not None:
        transcripts.extend(histories)
    results["finished_at"] = _iso_now()
    results["duration_s"] = time.perf_counter() - started_run
    return results
