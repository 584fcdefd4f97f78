"""Per-key figures (``omlx_key_requests_total``, ``omlx_key_tokens_total``): counted by the API's
key middleware (inference/keys/middleware.py) and the generation observer, read by the console's
Keys page. A key is labelled by its id and name; the --api-key by id "-"."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from .definitions import KEY_REQUESTS, KEY_TOKENS

ADMIN_LABELS = ("-", "--api-key")
KeyLabels = Tuple[str, str]


def count_request(labels: Optional[KeyLabels]) -> None:
    if labels is not None:
        KEY_REQUESTS.labels(*labels).inc()


def count_tokens(labels: Optional[KeyLabels], prompt: int, completion: int) -> None:
    if labels is None:
        return
    if prompt:
        KEY_TOKENS.labels(*labels, "prompt").inc(prompt)
    if completion:
        KEY_TOKENS.labels(*labels, "completion").inc(completion)


def key_counts() -> Dict[str, Dict[str, float]]:
    """key_id -> {"requests", "prompt_tokens", "completion_tokens"} since this process started."""
    counts: Dict[str, Dict[str, float]] = {}

    def row(key_id: str) -> Dict[str, float]:
        return counts.setdefault(key_id, {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0})

    for metric in KEY_REQUESTS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                row(sample.labels["key_id"])["requests"] += sample.value
    for metric in KEY_TOKENS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                row(sample.labels["key_id"])[sample.labels["kind"] + "_tokens"] += sample.value
    return counts
