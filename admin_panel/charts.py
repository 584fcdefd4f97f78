"""SVG charts drawn on the server: line charts (series over time or over concurrency) and grouped
bar charts. No front-end chart code: a page or a websocket fragment embeds the SVG as it is.

Every chart is an ``<svg class="chart">`` with a ``<title>``, y axis ticks at round numbers, x
ticks, a legend, and ``data-points`` (how many values it drew) so tests can tell a chart grew.
All text is escaped.
"""

from __future__ import annotations

import math
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

Number = Union[int, float]
Series = Tuple[str, Sequence[Tuple[Number, Optional[Number]]]]

COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"]
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 56, 12, 28, 30
_TIME_FLOOR = 1e9  # x values above this are unix times


def compact(value: Number) -> str:
    """1234 -> 1.23k, 0.0123 -> 0.0123, 2.5e6 -> 2.5M."""
    if value is None:
        return ""
    v = float(value)
    if v == 0:
        return "0"
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= limit:
            return f"{v / limit:.3g}{suffix}"
    return f"{v:.3g}"


def nice_ticks(low: float, high: float, count: int = 5) -> List[float]:
    """Round tick values covering [low, high]."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = [round(start, 12)]
    while ticks[-1] < high - step * 1e-9 and len(ticks) < 50:
        ticks.append(round(start + len(ticks) * step, 12))
    return ticks


def _x_text(x: Number, is_time: bool) -> str:
    if is_time:
        return time.strftime("%H:%M", time.localtime(x))
    return compact(x)


def _frame(
    title: str, width: int, height: int, points: int, y_ticks: List[float], y_of, y_label: str
) -> List[str]:
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" data-points="{points}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{_PAD_LEFT}" y="16" class="chart-title" font-size="13" font-weight="600">'
        f"{escape(title)}</text>",
    ]
    right = width - _PAD_RIGHT
    for t in y_ticks:
        y = y_of(t)
        parts.append(f'<line x1="{_PAD_LEFT}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e5e7eb"/>')
        parts.append(
            f'<text x="{_PAD_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#4b5563">{escape(compact(t))}</text>'
        )
    if y_label:
        mid = (_PAD_TOP + height - _PAD_BOTTOM) / 2
        parts.append(
            f'<text x="12" y="{mid:.1f}" font-size="11" fill="#4b5563" text-anchor="middle" '
            f'transform="rotate(-90 12 {mid:.1f})">{escape(y_label)}</text>'
        )
    bottom = height - _PAD_BOTTOM
    parts.append(f'<line x1="{_PAD_LEFT}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#9ca3af"/>')
    return parts


def _legend(names: Iterable[str], width: int) -> List[str]:
    parts = []
    x = width - _PAD_RIGHT
    for i, name in reversed(list(enumerate(names))):
        label = escape(name)
        x -= 14 + 7 * len(name)
        parts.append(
            f'<rect x="{x}" y="7" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
            f'<text x="{x + 13}" y="16" font-size="11" fill="#111827">{label}</text>'
        )
    return parts


def line_chart(
    series: Sequence[Series],
    *,
    title: str = "",
    y_label: str = "",
    x_labels: Optional[Union[Dict[Number, str], Sequence[Tuple[Number, str]]]] = None,
    width: int = 640,
    height: int = 200,
    y_min: Optional[Number] = 0,
    x_range: Optional[Tuple[Number, Number]] = None,
) -> SafeString:
    """Lines through each series' (x, y) points (a None y breaks the line); x values above 1e9
    are read as unix times (ticks as HH:MM). ``x_labels`` replaces the automatic x ticks;
    ``x_range`` (low, high) fixes the x axis (several charts of one time window line up)."""
    xs = [x for _, pts in series for x, y in pts if y is not None]
    ys = [y for _, pts in series for x, y in pts if y is not None]
    count = len(ys)
    if not ys:
        y_lo, y_hi = 0.0, 1.0
        x_lo, x_hi = 0.0, 1.0
    else:
        y_lo = min(ys) if y_min is None else min(float(y_min), min(ys))
        y_hi = max(ys)
        x_lo, x_hi = min(xs), max(xs)
    if x_range is not None:
        x_lo, x_hi = x_range
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_ticks = nice_ticks(y_lo, y_hi)
    y_lo, y_hi = min(y_ticks[0], y_lo), max(y_ticks[-1], y_hi)
    plot_w = width - _PAD_LEFT - _PAD_RIGHT
    plot_h = height - _PAD_TOP - _PAD_BOTTOM

    def x_of(x):
        return _PAD_LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def y_of(y):
        return _PAD_TOP + (1 - (y - y_lo) / ((y_hi - y_lo) or 1)) * plot_h

    parts = _frame(title, width, height, count, y_ticks, y_of, y_label)
    is_time = x_lo > _TIME_FLOOR
    if x_labels is not None:
        ticks = list(x_labels.items()) if isinstance(x_labels, dict) else list(x_labels)
    elif ys:
        ticks = [(x, _x_text(x, is_time)) for x in nice_ticks(x_lo, x_hi, 6) if x_lo <= x <= x_hi]
    else:
        ticks = []
    for x, label in ticks:
        parts.append(
            f'<text x="{x_of(x):.1f}" y="{height - _PAD_BOTTOM + 16}" text-anchor="middle" '
            f'font-size="11" fill="#4b5563">{escape(label)}</text>'
        )
    if not ys:
        parts.append(
            f'<text x="{_PAD_LEFT + plot_w / 2:.1f}" y="{_PAD_TOP + plot_h / 2:.1f}" '
            f'text-anchor="middle" font-size="12" fill="#6b7280">no data yet</text>'
        )
    for i, (name, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        runs: List[List[str]] = [[]]
        for x, y in sorted(pts, key=lambda p: p[0]):
            if y is None:
                runs.append([])
                continue
            runs[-1].append(f"{x_of(x):.1f},{y_of(y):.1f}")
        for run in runs:
            if len(run) > 1:
                parts.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{" ".join(run)}"/>'
                )
            for p in run:
                cx, cy = p.split(",")
                parts.append(
                    f'<circle cx="{cx}" cy="{cy}" r="{2.5 if len(run) < 40 else 1}" fill="{color}"/>'
                )
    parts += _legend([name for name, _ in series], width)
    parts.append("</svg>")
    return mark_safe("".join(parts))


def bar_chart(
    categories: Sequence[str],
    series: Sequence[Tuple[str, Sequence[Optional[Number]]]],
    *,
    title: str = "",
    y_label: str = "",
    width: int = 640,
    height: int = 220,
) -> SafeString:
    """Grouped bars: one group per category, one bar per series (a None value draws no bar)."""
    values = [v for _, vals in series for v in vals if v is not None]
    y_ticks = nice_ticks(0.0, max(values) if values else 1.0)
    y_hi = y_ticks[-1] or 1.0
    plot_w = width - _PAD_LEFT - _PAD_RIGHT
    plot_h = height - _PAD_TOP - _PAD_BOTTOM

    def y_of(y):
        return _PAD_TOP + (1 - y / y_hi) * plot_h

    parts = _frame(title, width, height, len(values), y_ticks, y_of, y_label)
    group_w = plot_w / max(1, len(categories))
    bar_w = group_w * 0.8 / max(1, len(series))
    for c, category in enumerate(categories):
        left = _PAD_LEFT + c * group_w + group_w * 0.1
        for s, (name, vals) in enumerate(series):
            v = vals[c] if c < len(vals) else None
            if v is None:
                continue
            top = y_of(v)
            parts.append(
                f'<rect x="{left + s * bar_w:.1f}" y="{top:.1f}" width="{bar_w - 2:.1f}" '
                f'height="{_PAD_TOP + plot_h - top:.1f}" fill="{COLORS[s % len(COLORS)]}">'
                f"<title>{escape(name)} {escape(category)}: {escape(compact(v))}</title></rect>"
            )
        parts.append(
            f'<text x="{_PAD_LEFT + (c + 0.5) * group_w:.1f}" y="{height - _PAD_BOTTOM + 16}" '
            f'text-anchor="middle" font-size="11" fill="#4b5563">{escape(category)}</text>'
        )
    if not values:
        parts.append(
            f'<text x="{_PAD_LEFT + plot_w / 2:.1f}" y="{_PAD_TOP + plot_h / 2:.1f}" '
            f'text-anchor="middle" font-size="12" fill="#6b7280">no data yet</text>'
        )
    parts += _legend([name for name, _ in series], width)
    parts.append("</svg>")
    return mark_safe("".join(parts))
