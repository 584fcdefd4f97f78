"""Number formats of the Benchmark page's tables."""

from django import template

register = template.Library()


@register.filter
def ms(seconds):
    """Seconds as milliseconds with one decimal; "-" for none."""
    return "-" if seconds is None or seconds == "" else f"{float(seconds) * 1000:.1f}"


@register.filter
def rate(value):
    """A rate (tokens/s) or a value in ms, one decimal; "-" for none."""
    return "-" if value is None or value == "" else f"{float(value):.1f}"


@register.filter
def best_decode(results):
    """The highest aggregate decode tokens/s of a run's results (None without any)."""
    rows = (results or {}).get("decode") or [] if isinstance(results, dict) else []
    values = [r["tokens_per_s"]["aggregate"] for r in rows if r["tokens_per_s"]["aggregate"] is not None]
    return max(values) if values else None


@register.filter
def percent(value):
    """A share (0..1) as a percentage with one decimal; "-" for none."""
    return "-" if value is None or value == "" else f"{float(value) * 100:.1f}%"


@register.filter
def per_pass(value):
    """Tokens per verify pass, two decimals; "-" for none."""
    return "-" if value is None or value == "" else f"{float(value):.2f}"


@register.filter
def perplexity(value):
    """A perplexity: three decimals, or three significant digits in e-notation from a million
    up (random weights score astronomically); "-" for none."""
    if value is None or value == "":
        return "-"
    value = float(value)
    return f"{value:.3f}" if value < 1e6 else f"{value:.3e}"
