"""The benchmark: its settings, its scenarios and the plain-data results they produce.

One run, in this order (every prompt starts with a random nonce, so no cache can help except
where the cached scenario wants it):

1. warm-up: two requests (the first loads the model, compiles); their prompt token counts give
   the tokens of the nonce and per word of the filler text, so that prompts of N tokens can be
   written for any tokenizer, local or remote.
2. prefill: at each concurrency c, ``repeats`` rounds of c prompts of ``prompt_tokens`` tokens
   sent at once with max_tokens 1. Per request: TTFT and prompt tokens / TTFT; per round:
   all prompt tokens / the time until the last first token (aggregate).
3. decode: at each concurrency c, ``repeats`` rounds of c short prompts, ``gen_tokens`` tokens
   each with ignore_eos. Per stream: (tokens - 1) / (last token - first token); aggregate: all
   generated tokens / the round's wall time (first request sent to last token).
4. cold vs cached: a unique prompt of ``cache_prompt_tokens`` tokens sent once (cold), then
   the same prompt ``cached_repeats`` times one after the other (cached). Both TTFT sets, their
   p50 ratio, and the cached tokens the target reported.

Speculative decoding: every request asks for ``settings.speculative`` (None: the model's own
setting; ``Target.speculative``), and the target's speculative counters are read around each
decode level (its row's ``speculative``) and around the whole run after the warm-up (the results'
``speculative``): ``speculation.difference`` of the two readings, None where the target has no
counters. They are the model's totals, so other requests to the model during the run count too.

``run_benchmark`` returns the results (``RESULTS_VERSION``) and calls ``progress(done, total,
message, results)`` after every step with the results so far.
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from dataclasses import asdict, dataclass, fields
from typing import Callable, Dict, List, Optional, Sequence

from .speculation import METHODS, difference
from .stats import summary
from .targets import StreamResult, Target, TargetError

RESULTS_VERSION = 2  # 2: speculative (the run's and each decode row's counters)
Progress = Callable[[int, int, str, dict], None]

_FILLER = (
    "the cache keeps every block of tokens it has seen so that a prompt computed once is "
    "never computed again and the next request starts from where the last one ended while "
    "the server batches many streams together on one machine"
).split()
_CALIBRATION_WORDS = 128
_SHORT_PROMPT_WORDS = 8
_MAX_ERRORS_KEPT = 10


@dataclass(frozen=True)
class BenchSettings:
    """What one benchmark run does (see the module docstring).

    concurrency: the concurrency levels of the prefill and decode scenarios.
    prompt_tokens: prompt length of the prefill scenario.
    gen_tokens: tokens generated per stream in the decode scenario.
    repeats: rounds per concurrency level (each round sends c requests at once).
    cache_prompt_tokens: prompt length of the cold-vs-cached scenario.
    cached_repeats: how many times the cached prompt is sent again.
    ignore_eos: ask the target to generate exactly gen_tokens (where it supports it).
    speculative: the speculative decoding method every request asks for (off, lookup, suffix,
    draft; None: the model's own setting).
    """

    concurrency: Sequence[int] = (1, 2, 4, 8)
    prompt_tokens: int = 256
    gen_tokens: int = 32
    repeats: int = 1
    cache_prompt_tokens: int = 512
    cached_repeats: int = 3
    ignore_eos: bool = True
    speculative: Optional[str] = None

    LIMITS = {
        "prompt_tokens": (1, 1_000_000),
        "gen_tokens": (2, 100_000),
        "repeats": (1, 100),
        "cache_prompt_tokens": (1, 1_000_000),
        "cached_repeats": (1, 100),
    }
    MAX_CONCURRENCY = 256

    def __post_init__(self):
        object.__setattr__(self, "concurrency", tuple(self.concurrency))
        if not self.concurrency:
            raise ValueError("concurrency: give at least one level")
        for c in self.concurrency:
            if not isinstance(c, int) or isinstance(c, bool) or not 1 <= c <= self.MAX_CONCURRENCY:
                raise ValueError(
                    f"concurrency {c!r}: each level must be an integer in [1, {self.MAX_CONCURRENCY}]"
                )
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError("concurrency: a level is given twice")
        for name, (low, high) in self.LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name}={value!r}: must be an integer in [{low}, {high}]")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError("ignore_eos must be true or false")
        if self.speculative is not None and self.speculative not in METHODS:
            raise ValueError(f"speculative={self.speculative!r}: must be one of {', '.join(METHODS)}")

    def to_dict(self) -> dict:
        values = asdict(self)
        values["concurrency"] = list(self.concurrency)
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "BenchSettings":
        """From plain data (JSON); ValueError for unknown keys or bad values."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown benchmark settings: {', '.join(unknown)}")
        return cls(**values)

    def total_steps(self) -> int:
        return 1 + 2 * len(self.concurrency) * self.repeats + 1 + self.cached_repeats


PRESETS: Dict[str, BenchSettings] = {
    # a quick look (and the tests): two levels, few tokens
    "small": BenchSettings(
        concurrency=(1, 2),
        prompt_tokens=64,
        gen_tokens=8,
        repeats=1,
        cache_prompt_tokens=128,
        cached_repeats=2,
    ),
    "default": BenchSettings(),
}


def parse_concurrency(text: str) -> List[int]:
    """ "1,2,4,8" -> [1, 2, 4, 8]; ValueError with a message for anything else."""
    levels = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        try:
            levels.append(int(part))
        except ValueError:
            raise ValueError(
                f"concurrency {text!r}: give integers separated by commas, e.g. 1,2,4,8"
            ) from None
    if not levels:
        raise ValueError("concurrency: give at least one level, e.g. 1,2,4,8")
    return levels


class _Prompts:
    """Unique prompts of about N tokens of the target's tokenizer: a nonce, then filler words.
    ``calibrate`` fits tokens = fixed + per_word * words from two measured prompts."""

    def __init__(self):
        self.tokens_per_word = 1.0
        self.fixed_tokens = 0.0  # the nonce's tokens (and any the server adds, e.g. BOS)

    @staticmethod
    def words(count: int) -> str:
        return " ".join(_FILLER[i % len(_FILLER)] for i in range(max(1, count)))

    def calibrate(self, words_a: int, tokens_a: int, words_b: int, tokens_b: int) -> None:
        if tokens_a > 0 and tokens_b > tokens_a and words_b > words_a:
            self.tokens_per_word = (tokens_b - tokens_a) / (words_b - words_a)
            self.fixed_tokens = max(0.0, tokens_a - self.tokens_per_word * words_a)
        elif tokens_b > 0:
            self.tokens_per_word = tokens_b / (words_b + 1)

    def unique(self, tokens: int) -> str:
        nonce = secrets.token_hex(4)
        return f"{nonce} {self.words(round((tokens - self.fixed_tokens) / self.tokens_per_word))}"

    def short(self) -> str:
        return f"{secrets.token_hex(4)} {self.words(_SHORT_PROMPT_WORDS)}"


def _iso_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _errors_of(batch: List[StreamResult]) -> List[str]:
    return [r.error for r in batch if r.error is not None]


def _prefill_row(c: int, rounds: List[List[StreamResult]]) -> dict:
    ok = [r for batch in rounds for r in batch if r.error is None and r.ttft is not None]
    aggregate = []
    for batch in rounds:
        good = [r for r in batch if r.error is None and r.ttft is not None]
        if good:
            span = max(r.token_times[0] for r in good) - min(r.sent_at for r in good)
            if span > 0:
                aggregate.append(sum(r.prompt_tokens for r in good) / span)
    per_stream = [r.prompt_tokens / r.ttft for r in ok if r.ttft > 0]
    return {
        "concurrency": c,
        "requests": sum(len(b) for b in rounds),
        "ok": len(ok),
        "errors": sum(len(_errors_of(b)) for b in rounds),
        "prompt_tokens": round(sum(r.prompt_tokens for r in ok) / len(ok)) if ok else 0,
        "cached_tokens": sum(r.cached_tokens for r in ok),
        "ttft_s": summary(r.ttft for r in ok),
        "tokens_per_s": {
            "per_stream": summary(per_stream)["mean"],
            "per_stream_p50": summary(per_stream)["p50"],
            "aggregate": summary(aggregate)["mean"],
        },
    }


def _decode_row(c: int, rounds: List[List[StreamResult]]) -> dict:
    ok = [r for batch in rounds for r in batch if r.error is None and r.ttft is not None]
    aggregate = []
    for batch in rounds:
        good = [r for r in batch if r.error is None and r.ended_at is not None]
        if good:
            span = max(r.ended_at for r in good) - min(r.sent_at for r in good)
            if span > 0:
                aggregate.append(sum(r.completion_tokens for r in good) / span)
    per_stream = [r.decode_tokens_per_s for r in ok if r.decode_tokens_per_s is not None]
    return {
        "concurrency": c,
        "requests": sum(len(b) for b in rounds),
        "ok": len(ok),
        "errors": sum(len(_errors_of(b)) for b in rounds),
        "completion_tokens": sum(r.completion_tokens for r in ok),
        "ttft_s": summary(r.ttft for r in ok),
        "tokens_per_s": {
            "per_stream": summary(per_stream)["mean"],
            "per_stream_p50": summary(per_stream)["p50"],
            "aggregate": summary(aggregate)["mean"],
        },
    }


def _cache_row(cold: List[StreamResult], cached: List[StreamResult]) -> dict:
    cold_ok = [r.ttft for r in cold if r.ttft is not None]
    cached_ok = [r for r in cached if r.ttft is not None]
    cold_s, cached_s = summary(cold_ok), summary(r.ttft for r in cached_ok)
    ratio = None
    if cold_s["p50"] and cached_s["p50"]:
        ratio = cold_s["p50"] / cached_s["p50"]
    every = cold + cached
    return {
        "prompt_tokens": max((r.prompt_tokens for r in every), default=0),
        "cold_ttft_s": cold_ok,
        "cached_ttft_s": [r.ttft for r in cached_ok],
        "cold": cold_s,
        "cached": cached_s,
        "speedup": ratio,
        "cold_cached_tokens": [r.cached_tokens for r in cold if r.error is None],
        "cached_tokens": [r.cached_tokens for r in cached_ok],
        "requests": len(every),
        "errors": len(_errors_of(every)),
    }


def empty_results(target: dict, settings: BenchSettings) -> dict:
    return {
        "version": RESULTS_VERSION,
        "target": target,
        "settings": settings.to_dict(),
        "started_at": _iso_now(),
        "finished_at": None,
        "duration_s": None,
        "tokens_per_word": None,
        "prefill": [],
        "decode": [],
        "cache": None,
        "speculative": None,
        "errors": [],
    }


def run_benchmark(target: Target, settings: BenchSettings, progress: Optional[Progress] = None) -> dict:
    """Run every scenario against ``target``; TargetError when the warm-up request fails (the
    target cannot serve at all). Errors of single requests are counted, not raised.
    ``target.speculative`` is ``settings.speculative`` for the run (set back afterwards)."""
    kept, target.speculative = target.speculative, settings.speculative
    try:
        return _run_benchmark(target, settings, progress)
    finally:
        target.speculative = kept


def _run_benchmark(target: Target, settings: BenchSettings, progress: Optional[Progress]) -> dict:
    results = empty_results(target.describe(), settings)
    started = time.perf_counter()
    total = settings.total_steps()
    done = 0
    prompts = _Prompts()

    def step(message: str, batch: List[StreamResult]) -> None:
        nonlocal done
        done += 1
        for error in _errors_of(batch):
            if len(results["errors"]) < _MAX_ERRORS_KEPT and error not in results["errors"]:
                results["errors"].append(error)
        if progress is not None:
            progress(done, total, message, results)

    if progress is not None:
        progress(0, total, "warming up", results)
    warm = target.generate(
        [f"{secrets.token_hex(4)} {prompts.words(_CALIBRATION_WORDS)}"], 2, settings.ignore_eos
    )
    if warm[0].error is not None:
        raise TargetError(warm[0].error)
    short = target.generate([f"{secrets.token_hex(4)} {prompts.words(_SHORT_PROMPT_WORDS)}"], 1, False)
    prompts.calibrate(
        _SHORT_PROMPT_WORDS,
        short[0].prompt_tokens if short[0].error is None else 0,
        _CALIBRATION_WORDS,
        warm[0].prompt_tokens,
    )
    results["tokens_per_word"] = prompts.tokens_per_word
    run_start = target.speculative_counters()  # after the warm-up: the run's requests only

    def speculative(before: Optional[dict]) -> Optional[dict]:
        return difference(before, target.speculative_counters(), settings.speculative)

    step("warmed up", warm + short)

    for c in settings.concurrency:
        rounds = []
        for r in range(settings.repeats):
            batch = target.generate([prompts.unique(settings.prompt_tokens) for _ in range(c)], 1, False)
            rounds.append(batch)
            if r == settings.repeats - 1:
                results["prefill"].append(_prefill_row(c, rounds))
            step(f"prefill at concurrency {c} ({r + 1}/{settings.repeats})", batch)

    for c in settings.concurrency:
        rounds, before = [], target.speculative_counters()
        for r in range(settings.repeats):
            batch = target.generate(
                [prompts.short() for _ in range(c)], settings.gen_tokens, settings.ignore_eos
            )
            rounds.append(batch)
            if r == settings.repeats - 1:
                results["decode"].append(dict(_decode_row(c, rounds), speculative=speculative(before)))
                results["speculative"] = speculative(run_start)
            step(f"decode at concurrency {c} ({r + 1}/{settings.repeats})", batch)

    prompt = prompts.unique(settings.cache_prompt_tokens)
    cold = target.generate([prompt], 1, False)
    results["cache"] = _cache_row(cold, [])
    step("cold prompt", cold)
    cached: List[StreamResult] = []
    for i in range(settings.cached_repeats):
        batch = target.generate([prompt], 1, False)
        cached += batch
        results["cache"] = _cache_row(cold, cached)
        step(f"cached prompt ({i + 1}/{settings.cached_repeats})", batch)

    results["speculative"] = speculative(run_start)
    results["finished_at"] = _iso_now()
    results["duration_s"] = time.perf_counter() - started
    return results
