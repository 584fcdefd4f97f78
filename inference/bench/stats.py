"""Summaries of measured values: percentiles with linear interpolation (as numpy's default)."""

from __future__ import annotations

import math
from typing import Dict, Iterable, Optional


def percentile(values: Iterable[float], q: float) -> Optional[float]:
    """The ``q``-th percentile (0..100) of ``values``; None when there are none."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    rank = (len(data) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return data[low] + (data[high] - data[low]) * (rank - low)


def summary(values: Iterable[float]) -> Dict[str, Optional[float]]:
    """p50, p95, p99, mean, min and max of ``values`` (all None when there are none)."""
    data = [v for v in values if v is not None]
    if not data:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "min": None, "max": None}
    return {
        "p50": percentile(data, 50),
        "p95": percentile(data, 95),
        "p99": percentile(data, 99),
        "mean": sum(data) / len(data),
        "min": min(data),
        "max": max(data),
    }
