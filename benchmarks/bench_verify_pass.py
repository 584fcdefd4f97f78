"""A verify pass of a 16-row decode batch in isolation (issue 27, (c)): what a [B, 1] and a
[B, W] pass cost over left-padded rows at different lengths (the edit workload's context), on
the float32 SmolLM2 copy of bench_speculative, through the engine's model path (its loader,
mlx-lm's batch caches merged as ``DecodeBatch`` merges them, the CPU attention on) and through
bare mlx-lm (the same caches, mlx-lm's attention), plus what the steps around a verify pass add:

- ``first pass after joining``: the rows' caches joined into the batch one at a time (merge
  of one row, extend of the batch, per row: the decode batch before issue 27's fix) or
  merged together (one merge, as it is now); the joins are lazy, so the first pass pays them;
- ``rollback with a shift``: rows that kept different numbers of drafted tokens (a trim, and a
  roll of the rows that kept fewer: the rollback before issue 27's holes), evaluated on its own;
- ``rollback with holes``: the same rollback as the engine does it now (a trim, the rejected
  positions of the rows that kept fewer masked as holes, ``speculative.holes``), and the
  [B, 1] pass that follows it (attending over the holes, masked), and the holes' compaction
  (one gather of the buffer, run once the holes pass a threshold);
- ``a row leaving``: the middle row leaves the batch and a [B - 1, 1] pass follows, timed
  together: through mlx-lm's ``filter`` (a gather of every staying row, which the pass waits
  for: the decode batch before) and through ``batch_leave.leave`` (the rows past the new count
  moved into the leaving row's slot, in place: the decode batch now);
- ``a row joining``: after the middle row left in place, a row as long as it joins and a
  [B, 1] pass follows, timed together: merged and through mlx-lm's ``extend`` (a copy of every
  row: the decode batch before) and through ``batch_join.join`` (written into the spare row the
  leaving one left: the decode batch now).

Alternating rounds, median seconds and the ratio to a [B, 1] pass.

    PYTHONPATH=. OMLX_HOME=/tmp/omlx-shared-smollm2 .venv/bin/python benchmarks/bench_verify_pass.py \
        --context 3584 --rows 16 --width 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import inference  # noqa: E402,F401  (fast BLAS before mlx)
import mlx.core as mx  # noqa: E402
from mlx_lm.models.cache import KVCache  # noqa: E402

import bench_speculative  # noqa: E402
from inference.engine import batch_join, batch_leave, cache_io, cpu_attention  # noqa: E402
from inference.engine.model_loader import load_model  # noqa: E402
from inference.engine.speculative.rollback import cache_arrays, roll_back  # noqa: E402


def row_caches(context: list, lengths: list) -> list:
    """One request's caches per length: the first n positions of ``context``'s."""
    out = []
    for n in lengths:
        row = []
        for c in context:
            k = KVCache()
            k.keys, k.values, k.offset = mx.array(c.keys[..., :n, :]), mx.array(c.values[..., :n, :]), n
            row.append(k)
        out.append(row)
    mx.eval([a for row in out for c in row for a in (c.keys, c.values)])
    return out


def joined(rows: list, together: bool) -> list:
    """The batch caches of ``rows``: merged together, or one row at a time (lazy)."""
    if together:
        return [type(layer[0]).merge(list(layer)) for layer in zip(*rows)]
    batch = None
    for row in rows:
        caches = [type(c).merge([c]) for c in row]
        if batch is None:
            batch = caches
        else:
            for b, c in zip(batch, caches):
                b.extend(c)
    return batch


def timed_pass(model, cache, rows: int, width: int, trim: bool = True) -> float:
    start = time.perf_counter()
    logits = model(mx.array([[7] * width] * rows, dtype=mx.uint32), cache=cache)
    mx.eval(mx.argmax(logits, axis=-1))
    seconds = time.perf_counter() - start
    if trim:
        for c in cache:
            c.trim(width)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=int, default=3584, help="the longest row's tokens")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--width", type=int, default=5, help="1 + drafted tokens per row")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    B, W = args.rows, args.width
    loaded = load_model(bench_speculative.float32_copy(bench_speculative.smollm2_folder()))
    model = loaded.model
    print(f"CPU attention: {cpu_attention.setup(model)}", flush=True)
    context = loaded.new_cache()
    tokens = mx.array([[(i * 7919) % 40000 + 100 for i in range(args.context)]], dtype=mx.uint32)
    for start in range(0, args.context, 512):
        mx.eval(model(tokens[:, start : start + 512], cache=context))
    lengths = [args.context - 512 + (r * 31) % 512 for r in range(B)]  # left padding 0 to 511
    rows = row_caches(context, lengths)
    first = {"one at a time": [], "together": []}
    seconds = {(on, w): [] for on in (True, False) for w in (1, W, "roll", "holes", "after", "compact")}
    leaving = {"filter": [], "leave": []}
    joining = {"extend": [], "join": []}
    for _ in range(args.rounds):
        cpu_attention.enable_on_this_thread(True)
        for name in first:
            cache = joined(rows, name == "together")
            first[name].append(timed_pass(model, cache, B, 1))
            del cache
        for on in (True, False):
            cpu_attention.enable_on_this_thread(on)
            cache = joined(rows, True)
            timed_pass(model, cache, B, 1)  # (its joins, and the buffer's growth)
            for w in (1, W):
                seconds[on, w].append(timed_pass(model, cache, B, w))
            timed_pass(model, cache, B, W, trim=False)
            start = time.perf_counter()
            remove = [(W - 1) - r % W for r in range(B)]  # rows keep 0 .. W - 1 drafts
            roll_back(cache, remove)
            mx.eval([a for c in cache for a in cache_arrays(c)])
            seconds[on, "roll"].append(time.perf_counter() - start)
            timed_pass(model, cache, B, W, trim=False)
            start = time.perf_counter()
            roll_back(cache, remove, holes=True)
            mx.eval(
                [a for c in cache for a in cache_arrays(c)] + [c.valid for c in cache if hasattr(c, "valid")]
            )
            seconds[on, "holes"].append(time.perf_counter() - start)
            seconds[on, "after"].append(timed_pass(model, cache, B, 1))
            start = time.perf_counter()
            for c in cache:
                if hasattr(c, "compact"):  # (one row: its rollback trims, no holes)
                    c.compact()
            mx.eval([a for c in cache for a in cache_arrays(c)])
            seconds[on, "compact"].append(time.perf_counter() - start)
            del cache
        cpu_attention.enable_on_this_thread(True)
        for how, seconds_of in leaving.items() if B > 1 else ():  # (a row leaving: of two or more)
            cache = joined(rows, True)
            timed_pass(model, cache, B, 1)
            order = batch_leave.leave_order(B, [B // 2])
            start = time.perf_counter()
            if how == "filter":
                for c in cache:
                    c.filter(order)
            else:
                batch_leave.leave(cache, order)
            timed_pass(model, cache, B - 1, 1)
            seconds_of.append(time.perf_counter() - start)
            del cache
        for how, seconds_of in joining.items() if B > 1 else ():
            cache = joined(rows, True)
            timed_pass(model, cache, B, 1)
            batch_leave.leave(cache, batch_leave.leave_order(B, [B // 2]))  # in place: a spare row
            timed_pass(model, cache, B - 1, 1)
            newcomer = [list(layer) for layer in zip(rows[B // 2])]  # (a row as long as the one that left)
            mx.eval([a for c in cache for a in cache_arrays(c)])
            start = time.perf_counter()
            for c, layer in zip(cache, newcomer):
                if how == "extend" or not batch_join.join(c, layer):
                    c.extend(cache_io.merge_rows(layer))
            timed_pass(model, cache, B, 1)
            seconds_of.append(time.perf_counter() - start)
            del cache
    med = {key: statistics.median(s) for key, s in seconds.items()}
    step = med[True, 1]
    print(f"B={B} rows of {min(lengths)} to {max(lengths)} tokens, W={W}, {args.rounds} rounds:")
    for name, s in first.items():
        after = statistics.median(s)
        print(f"  first [B, 1] pass after joining {name}: {after:.2f} s ({after / step:.1f}x)")
    for on in (True, False):
        one = med[on, 1]
        label = "engine (CPU attention)" if on else "bare mlx-lm attention"
        print(
            f"  {label}: [B, 1] {one:.2f} s, [B, {W}] {med[on, W]:.2f} s ({med[on, W] / one:.2f}x), "
            f"rollback with a shift {med[on, 'roll']:.2f} s ({med[on, 'roll'] / one:.2f}x), "
            f"rollback with holes {med[on, 'holes']:.4f} s ({med[on, 'holes'] / one:.4f}x), "
            f"[B, 1] after the holes {med[on, 'after']:.2f} s ({med[on, 'after'] / one:.2f}x), "
            f"their compaction {med[on, 'compact']:.2f} s ({med[on, 'compact'] / one:.2f}x)",
            flush=True,
        )
    ways = {"filter": "mlx-lm's filter (before)", "leave": "batch_leave, in place (now)"}
    for how, s in leaving.items() if B > 1 else ():
        after = statistics.median(s)
        print(f"  a row leaving + [B - 1, 1] pass, {ways[how]}: {after:.2f} s ({after / step:.2f}x)")
    ways = {"extend": "merge and mlx-lm's extend (before)", "join": "batch_join, a spare row (now)"}
    for how, s in joining.items() if B > 1 else ():
        after = statistics.median(s)
        print(f"  a row joining + [B, 1] pass, {ways[how]}: {after:.2f} s ({after / step:.2f}x)")


if __name__ == "__main__":
    main()
