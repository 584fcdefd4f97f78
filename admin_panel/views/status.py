"""The Status page (/admin/status/, the console's home): cards with the current figures and charts
of the last hour (admin_panel/history.py), kept up to date by admin_panel/consumers/status.py.

``cards_context()`` and ``charts_context()`` are synchronous (they read the pool and the process);
the view and the consumer render the same partials with them.
"""

from __future__ import annotations

import time
from typing import List, Optional

from django.shortcuts import render

from admin_panel.auth import admin_required
from admin_panel.charts import line_chart
from admin_panel.history import History, Point, get_history
from inference import metrics
from inference.pool.memory import format_bytes
from inference.pool.memory_guard import current as current_guard

MiB = 2**20
CHART_WIDTH, CHART_HEIGHT = 600, 200


@admin_required
def status(request):
    history = get_history()
    context = dict(cards_context(history), **charts_context(history))
    return render(request, "admin_panel/status.html", context)


def cards_context(history: History) -> dict:
    """The cards: gauges and totals read now, rates from the last points."""
    now = metrics.totals()
    points = history.points()
    latest = points[-1] if points else None
    used, limit = now.model_memory_used, now.model_memory_limit
    looked = now.lookup_tokens
    ttft = _last(points, "ttft_p50")
    return {
        "serves_models": now.serves_models,
        "models": [
            {
                "id": i,
                "memory": format_bytes(m["memory_bytes"]),
                "running": m["running"],
                "waiting": m["waiting"],
                "speculation": _speculation(m.get("speculative") or {}),
            }
            for i, m in sorted(now.models.items())
        ],
        "memory_used": format_bytes(used) if used is not None else "–",
        "memory_limit": format_bytes(limit),
        "memory_percent": None if not limit or used is None else min(100.0, 100.0 * used / limit),
        "process_memory": format_bytes(now.process_memory) if now.process_memory is not None else "–",
        "process_limit": format_bytes(now.process_memory_limit),
        "running": now.running,
        "waiting": now.waiting,
        "in_flight": now.api_in_flight,
        "requests": now.generations,
        "tokens_per_second": _fixed(latest.tokens_per_second if latest else None, 1),
        "ttft_p50": _ms(ttft[0] if ttft else None),
        "ttft_p95": _ms(ttft[1].ttft_p95 if ttft else None),
        "ttft_age": None if ttft is None else int(now.at - ttft[1].at),
        "hot_hit_rate": _percent(now.hot_hit_tokens / looked if looked else None),
        "cold_hit_rate": _percent(now.cold_hit_tokens / looked if looked else None),
        "tokens_saved": f"{now.hot_hit_tokens + now.cold_hit_tokens:,}",
        "lookup_tokens": f"{looked:,}",
        "interval": int(history.interval),
        "guard": guard_context(),
        "workers": workers_context(),
        "ranks": ranks_context(),
    }


def ranks_context() -> List[dict]:
    """A model split across machines: one row per rank, from the figures rank 0 last asked, with
    how the model is cut and what the rank holds of it."""
    rows = []
    for model_id, (parallel, ranks) in sorted(metrics.rank_figures().items()):
        for rank, f in enumerate(ranks):
            looked = f["lookup_tokens"]
            rows.append(
                {
                    "model": model_id,
                    "parallel": f"{parallel}, {len(ranks)} ranks",
                    "rank": rank,
                    "holds": metrics.rank_holds(f),
                    "memory": format_bytes(f["memory_bytes"]) if f["memory_bytes"] else "–",
                    "mlx": format_bytes(f["mlx_bytes"]),
                    "hot": format_bytes(f["hot_bytes"]),
                    "cold": format_bytes(f["cold_bytes"]),
                    "hot_hit_rate": _percent(f["hot_hit_tokens"] / looked if looked else None),
                    "cold_hit_rate": _percent(f["cold_hit_tokens"] / looked if looked else None),
                    "looked": f"{looked:,}",
                }
            )
    return rows


def workers_context() -> List[dict]:
    """Redis mode: one row per live worker, from the summary it publishes."""
    rows = []
    for worker, s in sorted(metrics.worker_summaries().items()):
        looked = s.lookup_tokens
        rows.append(
            {
                "id": worker,
                "models": ", ".join(s.models) or "none loaded",
                "running": s.running,
                "waiting": s.waiting,
                "memory": format_bytes(s.memory_bytes) if s.memory_bytes is not None else "–",
                "hot_hit_rate": _percent(s.hot_hit_tokens / looked if looked else None),
                "cold_hit_rate": _percent(s.cold_hit_tokens / looked if looked else None),
                "held": len(s.keys),
                "taken": s.jobs_taken,
            }
        )
    return rows


def guard_context() -> Optional[dict]:
    """The memory guard's card: level, the tightest limit and its free memory, what it did."""
    guard = current_guard()
    if guard is None:
        return None
    state = guard.snapshot()
    limit, used = state["limit"], state["used"]
    return {
        "level": state["level_name"],
        "source": state["source"] or "no limit read",
        "percent": _percent(state["ratio"]),
        "limit": format_bytes(limit) if limit else "–",
        "free": format_bytes(max(0, limit - used)) if limit else "–",
        **state["counts"],
    }


def charts_context(history: History) -> dict:
    """The charts of the last hour, and the time of their last point (the consumer re-sends them
    when it changes)."""
    points = history.points()

    def series(name: str, value) -> tuple:
        return name, [(p.at, value(p)) for p in points]

    times = [p.at for p in points]
    x_range = (times[0], times[-1]) if len(times) > 1 else None  # every chart over the same window
    x_labels = time_labels(times)

    def chart(series_list: List[tuple], title: str, y_label: str):
        return line_chart(
            series_list,
            title=title,
            y_label=y_label,
            x_labels=x_labels,
            x_range=x_range,
            width=CHART_WIDTH,
            height=CHART_HEIGHT,
        )

    return {
        "charts_at": points[-1].at if points else 0,
        "charts": [
            chart(
                [
                    series("model memory", lambda p: _mib(p.model_memory_used)),
                    series("process RSS", lambda p: _mib(p.process_memory)),
                ],
                "Memory",
                "MiB",
            ),
            chart(
                [
                    series("running", lambda p: p.running),
                    series("waiting", lambda p: p.waiting),
                    series("API in flight", lambda p: p.in_flight),
                ],
                "Requests",
                "requests",
            ),
            chart([series("generated", lambda p: p.tokens_per_second)], "Tokens per second", "tok/s"),
            chart(
                [
                    series("p50", lambda p: _scaled(p.ttft_p50, 1000)),
                    series("p95", lambda p: _scaled(p.ttft_p95, 1000)),
                ],
                "Time to first token",
                "ms",
            ),
            chart(
                [
                    series("hot", lambda p: _scaled(p.hot_hit_rate, 100)),
                    series("cold", lambda p: _scaled(p.cold_hit_rate, 100)),
                ],
                "Cache hit rate (prompt tokens)",
                "%",
            ),
            chart(
                [series("tokens saved", lambda p: p.tokens_saved)], "Prompt tokens from the cache", "tokens"
            ),
        ],
    }


def time_labels(times: List[float], count: int = 5) -> Optional[List[tuple]]:
    """``count`` x ticks over ``times`` (unix times), from the first on, the right edge left free
    (a label there would be cut): HH:MM:SS while the span is under ten minutes (HH:MM ticks would
    repeat), else HH:MM. None (the chart's own ticks) without a span."""
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    first, span = times[0], times[-1] - times[0]
    fmt = "%H:%M:%S" if span < 600 else "%H:%M"
    ticks = [first + span * i / count for i in range(count)]
    return [(t, time.strftime(fmt, time.localtime(t))) for t in ticks]


def _last(points: List[Point], field: str) -> Optional[tuple]:
    """(value, point) of the newest point where ``field`` was measured."""
    for point in reversed(points):
        value = getattr(point, field)
        if value is not None:
            return value, point
    return None


def _speculation(counts: dict) -> Optional[str]:
    """Speculative decoding's acceptance and tokens per verify pass; None before any pass."""
    passes, drafted = counts.get("verify_passes", 0), counts.get("drafted_tokens", 0)
    if not passes:
        return None
    accepted = counts.get("accepted_tokens", 0) / drafted if drafted else 0.0
    per_pass = counts.get("emitted_tokens", 0) / passes
    return f"speculative: {_percent(accepted)} accepted, {per_pass:.2f} tokens/pass"


def _mib(n: Optional[int]) -> Optional[float]:
    return None if n is None else n / MiB


def _scaled(value: Optional[float], factor: float) -> Optional[float]:
    return None if value is None else value * factor


def _fixed(value: Optional[float], digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ms(seconds: Optional[float]) -> str:
    return "–" if seconds is None else f"{seconds * 1000:.0f} ms"


def _percent(share: Optional[float]) -> str:
    return "–" if share is None else f"{share * 100:.1f}%"
