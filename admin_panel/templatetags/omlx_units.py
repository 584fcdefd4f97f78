"""Template filters for the console's numbers: bytes, rates, durations, shares."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def human_bytes(n) -> str:
    if n is None or n == "":
        return "–"
    n = float(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


@register.filter
def percent(value, total=None) -> str:
    """``value`` as a percentage: of ``total`` when given, else ``value`` is a fraction."""
    try:
        share = float(value) / float(total) if total is not None else float(value)
    except (TypeError, ValueError, ZeroDivisionError):
        return "–"
    return f"{share * 100:.1f}%"


@register.filter
def share_width(value, total) -> str:
    """A CSS width (0-100%) for a bar of ``value`` out of ``total``."""
    try:
        return f"{min(100.0, max(0.0, float(value) / float(total) * 100)):.1f}%"
    except (TypeError, ValueError, ZeroDivisionError):
        return "0%"


@register.filter
def duration(seconds) -> str:
    if seconds is None or seconds == "":
        return "–"
    s = float(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{s / n:.1f} {unit}"
    return f"{s:.1f} s"


@register.filter
def rate(bytes_per_s) -> str:
    if not bytes_per_s:
        return "–"
    return f"{float(bytes_per_s) / 1e6:.0f} MB/s"
