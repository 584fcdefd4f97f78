"""Speculative decoding in a benchmark run: what a target's speculative counters say, read before
and after a run, and their difference.

A target sends its ``speculative`` method (None: nothing, the model's own setting) with every
request: the engine target as ``SamplingParams.speculative``, a URL target as the request's
``speculative`` extension (``{"method": ...}``, docs/api.md). The counters are the engine's
totals for the model (``EngineStats.speculative``; over HTTP, omlx's ``/metrics`` series
``omlx_speculative_*_total{model=...}``): every request the model serves between the two readings
counts, so a benchmark reads them with nothing else running. A server without these series
(mlx-lm's, any other) gives None.
"""

from __future__ import annotations

import re
from typing import Optional

METHODS = ("off", "lookup", "suffix", "draft")  # SamplingParams.SPECULATIVE
COUNTERS = ("drafted_tokens", "accepted_tokens", "verify_passes", "emitted_tokens")
_SERIES = re.compile(r"omlx_speculative_(\w+?)(?:_total)?\{([^}]*)\} (\S+)$")


def parse_metrics(text: str, model: str) -> Optional[dict]:
    """The speculative counters of ``model`` in a Prometheus text exposition; None when it has
    none of them (not omlx, or the model is not loaded)."""
    out = {}
    for line in text.splitlines():
        match = _SERIES.match(line)
        if match and match.group(1) in COUNTERS:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            if labels.get("model") == model:
                out[match.group(1)] = int(float(match.group(3)))
    return out if set(out) == set(COUNTERS) else None


def difference(before: Optional[dict], after: Optional[dict], method: Optional[str]) -> Optional[dict]:
    """What the run did: each counter's increase, ``acceptance`` (accepted / drafted) and
    ``tokens_per_pass`` (emitted / verify passes; None without a pass). None when either reading
    is missing. ``method``: what the requests asked for (None: the model's setting)."""
    if before is None or after is None:
        return None
    out = {"method": method, **{key: after.get(key, 0) - before.get(key, 0) for key in COUNTERS}}
    drafted, passes = out["drafted_tokens"], out["verify_passes"]
    out["acceptance"] = out["accepted_tokens"] / drafted if drafted else None
    out["tokens_per_pass"] = out["emitted_tokens"] / passes if passes else None
    return out


def describe(spec: Optional[dict]) -> str:
    """One line for a report: ``accepted 12/40 drafted (30%), 1.25 tokens per verify pass``."""
    if spec is None:
        return "speculative counters: n/a (the target reports none)"
    share = "" if spec["acceptance"] is None else f" ({spec['acceptance']:.0%})"
    per_pass = "-" if spec["tokens_per_pass"] is None else f"{spec['tokens_per_pass']:.2f}"
    return (
        f"speculative {spec['method'] or 'the model setting'}: accepted {spec['accepted_tokens']}/"
        f"{spec['drafted_tokens']} drafted{share}, {spec['verify_passes']} verify passes, "
        f"{per_pass} tokens per verify pass"
    )


def read_metrics(client, url: str, headers: dict, model: str) -> Optional[dict]:
    """``parse_metrics`` of the ``/metrics`` of the server whose API base is ``url`` (an httpx
    client); None when it has no such page or cannot be reached."""
    root = url[: -len("/v1")] if url.endswith("/v1") else url
    try:
        response = client.get(root + "/metrics", headers=headers, timeout=30.0)
    except Exception:  # noqa: BLE001  (any transport error: no counters)
        return None
    return parse_metrics(response.text, model) if response.status_code == 200 else None
