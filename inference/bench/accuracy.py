"""`omlx bench --scenario accuracy`: quality next to speed, so quantizations can be compared.

One run, in this order:

1. perplexity over the text shipped with omlx (``perplexity``): scored on the engine's thread
   for a local target (this process's engine or model pool), from the prompt-token logprobs of
   ``/v1/completions`` (echo) for a ``--url`` target; a server that gives none is named in
   ``perplexity_note``.
2. HumanEval pass@1 (``humaneval``): the first ``limit`` problems, ``concurrency`` at a time,
   each completed greedily (temperature 0, at most ``max_tokens``, the stop sequences of
   ``humaneval.STOP``) through the target's generate (the API for ``--url``), each program run in
   ``sandbox.run_program`` with ``timeout`` seconds.

``run_accuracy`` returns plain data (``RESULTS_VERSION``; ``scenario`` is "accuracy") and
calls ``progress(done, total, message, results)`` after every step.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from typing import Callable, Dict, Optional

from . import humaneval, sandbox
from .runner import RESULTS_VERSION, _iso_now
from .targets import EngineTarget, OpenAITarget, Target, TargetError

Progress = Callable[[int, int, str, dict], None]
_MAX_ERRORS_KEPT = 10
_DETAIL_CHARS = 200  # of a failed program's stderr, kept per problem


@dataclass(frozen=True)
class AccuracySettings:
    """limit: HumanEval problems, the first N of 164 (0: perplexity only).
    max_tokens: tokens generated per problem at most.
    concurrency: problems sent at once.
    timeout: seconds each program may run (wall clock; CPU seconds are limited to it too).
    perplexity: score the shipped text (local targets).
    """

    limit: int = humaneval.TOTAL
    max_tokens: int = 384
    concurrency: int = 4
    timeout: float = 10.0
    perplexity: bool = True

    LIMITS = {"limit": (0, humaneval.TOTAL), "max_tokens": (16, 4096), "concurrency": (1, 64)}

    def __post_init__(self):
        for name, (low, high) in self.LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name}={value!r}: must be an integer in [{low}, {high}]")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)):
            raise ValueError(f"timeout={self.timeout!r}: must be a number of seconds")
        if not 1 <= self.timeout <= 120:
            raise ValueError(f"timeout={self.timeout!r}: must be between 1 and 120 seconds")
        if not isinstance(self.perplexity, bool):
            raise ValueError("perplexity must be true or false")

    def to_dict(self) -> dict:
        return dict(asdict(self), scenario="accuracy")

    @classmethod
    def from_dict(cls, values: dict) -> "AccuracySettings":
        """From plain data (JSON; ``scenario`` ignored); ValueError for unknown keys or bad values."""
        values = {k: v for k, v in values.items() if k != "scenario"}
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown accuracy settings: {', '.join(unknown)}")
        return cls(**values)

    def total_steps(self) -> int:
        return 1 + self.limit


ACCURACY_PRESETS: Dict[str, AccuracySettings] = {
    "small": AccuracySettings(limit=10, max_tokens=256),
    "default": AccuracySettings(),
}


def empty_results(target: dict, settings: AccuracySettings) -> dict:
    return {
        "version": RESULTS_VERSION,
        "scenario": "accuracy",
        "target": target,
        "settings": settings.to_dict(),
        "started_at": _iso_now(),
        "finished_at": None,
        "duration_s": None,
        "perplexity": None,
        "perplexity_note": None,
        "humaneval": None,
        "errors": [],
    }


def _humaneval_summary(rows: list, limit: int) -> dict:
    passed = sum(1 for r in rows if r["passed"])
    reasons: Dict[str, int] = {}
    for r in rows:
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    return {
        "problems": limit,
        "done": len(rows),
        "passed": passed,
        "pass_at_1": passed / len(rows) if rows else None,
        "outcomes": reasons,
        "rows": rows,
    }


def run_accuracy(target: Target, settings: AccuracySettings, progress: Optional[Progress] = None) -> dict:
    """Run both parts against ``target``; TargetError when the target cannot answer at all."""
    results = empty_results(target.describe(), settings)
    started = time.perf_counter()
    total = settings.total_steps()
    done = 0

    def step(count: int, message: str) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total, message, results)

    def error(text: str) -> None:
        if len(results["errors"]) < _MAX_ERRORS_KEPT and text not in results["errors"]:
            results["errors"].append(text)

    try:
        todo = humaneval.problems(settings.limit) if settings.limit else []
    except ValueError as exc:  # the package is missing: say so before any work
        raise TargetError(str(exc)) from None
    if progress is not None:
        progress(0, total, "perplexity", results)
    # Here, not at the top: perplexity imports the engine (mlx-lm, transformers: seconds), which
    # `omlx` (it imports this package for the bench command's parser) needs for no other command.
    from . import perplexity

    if not settings.perplexity:
        results["perplexity_note"] = "not asked for"
    elif isinstance(target, EngineTarget):
        try:
            scored = perplexity.score_engine(target.engine)
        except Exception as exc:  # a model whose forward takes no plain token batch (a VLM's)
            results["perplexity_note"] = f"could not be scored: {type(exc).__name__}: {exc}"
        else:
            results["perplexity"] = dict(scored, text=perplexity.TEXT_PATH.name, window=perplexity.WINDOW)
    elif isinstance(target, OpenAITarget):
        try:
            scored = perplexity.score_url(target)
        except ValueError as exc:
            results["perplexity_note"] = f"could not be scored over the API: {exc}"
        else:
            results["perplexity"] = dict(
                scored, text=perplexity.TEXT_PATH.name, window=None, via="echo logprobs"
            )
    else:
        results["perplexity_note"] = f"not available for a {type(target).__name__}"
    step(1, "perplexity done")

    rows: list = []
    for start in range(0, len(todo), settings.concurrency):
        batch = todo[start : start + settings.concurrency]
        answers = target.generate(
            [p["prompt"] for p in batch], settings.max_tokens, ignore_eos=False, stop=humaneval.STOP
        )
        if start == 0 and all(a.error is not None for a in answers):
            raise TargetError(answers[0].error)
        for problem, answer in zip(batch, answers):
            if answer.error is not None:
                error(answer.error)
                rows.append({"task_id": problem["task_id"], "passed": False, "reason": "no answer"})
                continue
            outcome = sandbox.run_program(humaneval.program(problem, answer.text), settings.timeout)
            rows.append(
                {
                    "task_id": problem["task_id"],
                    "passed": outcome.passed,
                    "reason": outcome.reason,
                    "detail": outcome.detail[-_DETAIL_CHARS:],
                }
            )
        results["humaneval"] = _humaneval_summary(rows, settings.limit)
        step(len(batch), f"HumanEval {len(rows)}/{len(todo)}")

    results["finished_at"] = _iso_now()
    results["duration_s"] = time.perf_counter() - started
    return results
