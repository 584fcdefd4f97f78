"""What an agentic run's requests waited for before their first tokens, from omlx's step trace
(bench_agentic.py --step-trace prints it for every omlx run).

The client and the server run on one machine and both read ``time.perf_counter`` (on Linux the
system-wide monotonic clock), but a run's request rows count from its own start. The offset is
found from the first tokens: each request's first token (sent + TTFT) lands where some step's
prefill ended (``start + prefill_seconds`` of a step with ``first_tokens``); the offset that puts
them closest, tried from the pairs of the first requests and those steps, is taken (its mean
error is printed: about a millisecond when they line up).

Each request's TTFT is then split by the steps it spans: the rest of the step it arrived during
(by that step's kind), whole steps that computed other requests' prompts (it waited behind
them), whole steps without prompt tokens (decode or verify steps between), and its own step up to
its first token. The first ``burst`` requests of a run (sent together at its start, each
waiting for the others' whole prompts) are left out.
"""

from __future__ import annotations

import bisect
import statistics
from typing import Dict, List, Tuple


def _kind(record: dict) -> str:
    if record.get("verify"):
        return "verify + prompt" if record["prompt_tokens"] else "verify only"
    if record["decode_passes"]:
        return "decode + prompt" if record["prompt_tokens"] else "decode only"
    return "prompt only" if record["prompt_tokens"] else "neither"


def offset(run: dict) -> Tuple[float, float]:
    """(server clock - the run's request clock, mean seconds between a first token and the nearest
    prefill end at that offset)."""
    steps = run["step_trace"]
    ends = sorted(s["start"] + s["prefill_seconds"] for s in steps if s["first_tokens"])
    firsts = sorted(r["sent_s"] + r["ttft_s"] for r in run["requests"] if r["error"] is None)
    if not ends or not firsts:
        return 0.0, float("inf")
    best = (float("inf"), 0.0)
    for end in ends:
        for first in firsts[:4]:
            shift, error = end - first, 0.0
            for t in firsts:
                i = bisect.bisect_left(ends, t + shift)
                error += min(abs(t + shift - ends[j]) for j in (i - 1, i) if 0 <= j < len(ends))
            best = min(best, (error, shift))
    return best[1], best[0] / len(firsts)


def waits(run: dict) -> dict:
    """Per request, mean seconds by what it waited for (keys below), and counts: requests,
    ``behind_prompts`` (those that waited for a whole step of another's prompt), ``arrived_in``
    (how many arrived during each kind of step), ``error_s`` (the alignment's)."""
    shift, error = offset(run)
    steps = run["step_trace"]
    starts = [s["start"] for s in steps]
    totals: Dict[str, float] = {}
    arrived_in: Dict[str, int] = {}
    n = behind = 0
    opening = sorted(r["sent_s"] for r in run["requests"])[: run["settings"]["burst"]]
    for r in run["requests"]:
        arrival = r["sent_s"] + shift
        if r["error"] is not None or not starts or arrival < starts[0] or r["sent_s"] <= opening[-1]:
            continue
        first = arrival + r["ttft_s"]
        i = bisect.bisect_right(starts, arrival) - 1
        parts: Dict[str, float] = {}
        while i < len(steps):
            s = steps[i]
            end, lo = s["start"] + s["seconds"], max(arrival, s["start"])
            if s["start"] <= first <= end + 0.002:
                parts["own step"] = parts.get("own step", 0.0) + first - lo
                break
            if lo < end:
                if s["start"] <= arrival:
                    key = "at arrival: " + _kind(s)
                    arrived_in[_kind(s)] = arrived_in.get(_kind(s), 0) + 1
                elif s["prompt_tokens"]:
                    key = "others' prompt steps"
                else:
                    key = "steps between"
                parts[key] = parts.get(key, 0.0) + end - lo
            i += 1
        parts["outside steps"] = r["ttft_s"] - sum(parts.values())
        behind += "others' prompt steps" in parts
        n += 1
        for key, value in parts.items():
            totals[key] = totals.get(key, 0.0) + value
    means = {key: value / n for key, value in totals.items()} if n else {}
    return {
        "requests": n,
        "behind_prompts": behind,
        "arrived_in": arrived_in,
        "error_s": error,
        "means_s": means,
    }


def waits_table(by_side: Dict[str, List[dict]]) -> str:
    """One row per side: its runs' requests together (means over runs, weighted by requests)."""
    keys = [
        "at arrival: decode only",
        "at arrival: verify only",
        "at arrival: decode + prompt",
        "at arrival: verify + prompt",
        "others' prompt steps",
        "steps between",
        "own step",
    ]
    head = ["requests", "behind a prompt", "arrived in a verify step"] + [f"{k} ms" for k in keys]
    lines = ["| side | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    errors = []
    for side, runs in by_side.items():
        found = [waits(run) for run in runs if run.get("step_trace")]
        errors += [w["error_s"] for w in found]
        n = sum(w["requests"] for w in found)
        if not n:
            continue
        mean = {k: sum(w["means_s"].get(k, 0.0) * w["requests"] for w in found) / n for k in keys}
        verify = sum(w["arrived_in"].get(k, 0) for w in found for k in ("verify only", "verify + prompt"))
        cells = [str(n), str(sum(w["behind_prompts"] for w in found)), str(verify)]
        cells += [f"{1000 * mean[k]:.1f}" for k in keys]
        lines.append(f"| {side} | " + " | ".join(cells) + " |")
    if errors:
        lines.append(f"\n(clock alignment: mean error {1000 * statistics.fmean(errors):.1f} ms a request)")
    return "\n".join(lines)
