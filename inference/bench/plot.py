"""The PNG of `omlx bench --plot`: tokens/s against concurrency, TTFT percentiles against
concurrency, and cold against cached TTFT. matplotlib is imported here only (Agg backend), so
that nothing else pays for it."""

from __future__ import annotations

from pathlib import Path


def write_png(results: dict, path) -> Path:
    """Draw ``results`` (``run_benchmark``'s) into the PNG file ``path``; ImportError without
    matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prefill, decode, cache = results.get("prefill") or [], results.get("decode") or [], results.get("cache")
    target = results.get("target") or {}
    fig, (speed, ttft, cold) = plt.subplots(1, 3, figsize=(15, 4.5))
    fig.suptitle(
        f"omlx bench: {target.get('model')} ({target.get('url') or 'local engine'}), "
        f"{results.get('started_at') or ''}"
    )

    def line(ax, rows, key, label, style):
        points = [
            (r["concurrency"], r["tokens_per_s"][key]) for r in rows if r["tokens_per_s"][key] is not None
        ]
        if points:
            ax.plot(*zip(*points), style, label=label)

    line(speed, prefill, "aggregate", "prefill, aggregate", "o-")
    line(speed, decode, "aggregate", "decode, aggregate", "s-")
    line(speed, decode, "per_stream", "decode, per stream", "s--")
    speed.set(title="tokens/s", xlabel="concurrency", ylabel="tokens/s")
    _concurrency_axis(speed, prefill or decode)

    for q, style in (("p50", "o-"), ("p95", "^--"), ("p99", "v:")):
        points = [(r["concurrency"], r["ttft_s"][q] * 1000) for r in prefill if r["ttft_s"][q] is not None]
        if points:
            ttft.plot(*zip(*points), style, label=f"prefill TTFT {q}")
    ttft.set(
        title=f"time to first token ({(results.get('settings') or {}).get('prompt_tokens')}-token prompts)",
        xlabel="concurrency",
        ylabel="ms",
    )
    _concurrency_axis(ttft, prefill)

    if cache and cache["cold"]["p50"] is not None:
        values = [cache["cold"]["p50"] * 1000, (cache["cached"]["p50"] or 0) * 1000]
        bars = cold.bar(["cold", "cached"], values, color=["#c0504d", "#4f81bd"])
        cold.bar_label(bars, fmt="%.1f")
        speedup = f", {cache['speedup']:.1f}x faster" if cache.get("speedup") else ""
        cold.set(title=f"TTFT p50, {cache['prompt_tokens']}-token prompt{speedup}", ylabel="ms")
    else:
        cold.set(title="cold vs cached TTFT: no data")
    for ax in (speed, ttft):
        if ax.lines:
            ax.legend(fontsize="small")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path


def _concurrency_axis(ax, rows) -> None:
    levels = [r["concurrency"] for r in rows]
    if levels:
        ax.set_xticks(levels)
