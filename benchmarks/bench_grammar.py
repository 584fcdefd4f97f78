"""Grammar engines for structured output, side by side in one run: xgrammar, llguidance and
outlines-core.

For each engine, vocabulary and grammar it measures
  - compile time: tokenizer preprocessing (once per model) and grammar compilation (once per
    distinct schema);
  - per generated token: computing the allowed-token bitmask, applying it to MLX logits
    (bits unpacked on the device, disallowed logits set to -inf; counted as the extra time of a
    masked argmax over a plain one) and advancing the matcher by the chosen token;
and prints that per-token overhead as a fraction of one decode step of a model with the same
vocabulary (batch 1, measured in the same run).

Vocabularies: the tiny test tokenizer (1,024 tokens, tiny model) and a synthetic byte-level
vocabulary of 151,936 tokens (Qwen2.5's size: words, numbers, JSON punctuation, whitespace runs,
CJK) next to the Qwen2.5-0.5B-shaped random model. The model folders come from
inference/testkit/ (benchmarks/out/models of the main checkout if built, else /tmp).

Tokens are chosen by a random walk: random logits, masked, argmax; a matcher that finishes is
restarted. outlines-core compiles regular expressions only, so its "json_object" is the regex
of ``{"type": "object"}`` (nesting depth-limited), not full JSON.

Last, omlx's engine itself: decode time per step with structured rows (llguidance) against the
same number of plain greedy tokens, batch 1 and 8, on the tiny and the 0.5B-shaped model.

This file times; what it times (grammars, vocabularies, the engines' adapters) is
benchmarks/grammar_workloads.py.

    .venv/bin/python benchmarks/bench_grammar.py [--tokens N] [--engines a,b] [--skip-large]
                                                 [--skip-engine] [--rounds N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.grammar_workloads import (  # noqa: E402
    ENGINES,
    GRAMMARS,
    model_folder,
    synthetic_vocab,
    tokenizer_vocab,
)

# -- measurement ---------------------------------------------------------------------------


def unpack(words: mx.array, vocab_size: int) -> mx.array:
    """[B, W] int32 bitmask -> [B, V] bool, on the device."""
    bits = mx.right_shift(words[..., None], mx.arange(32, dtype=mx.int32)) & 1
    return bits.reshape(words.shape[0], -1)[:, :vocab_size].astype(mx.bool_)


def walk(engine, compiled, vocab_size, n_tokens, seed=0):
    """Per-token seconds (mask, apply, advance) over a masked random walk of n_tokens."""
    bitmask = np.zeros((1, (vocab_size + 31) // 32), dtype=np.int32)
    key = mx.random.key(seed)
    m = engine.matcher(compiled)
    fills, applies, advances = [], [], []
    for step in range(n_tokens):
        if m.done():
            m = engine.matcher(compiled)
        logits = (
            mx.random.normal((1, vocab_size), key=mx.random.fold_in(key, step))
            if hasattr(mx.random, "fold_in")
            else mx.random.normal((1, vocab_size), key=mx.random.key(seed * 100003 + step))
        )
        mx.eval(logits)
        t = time.perf_counter()
        mx.argmax(logits, axis=-1).item()  # what an unconstrained row pays anyway
        t0 = time.perf_counter()
        m.fill(bitmask)
        t1 = time.perf_counter()
        masked = mx.where(unpack(mx.array(bitmask), vocab_size), logits, -mx.inf)
        token = mx.argmax(masked, axis=-1).item()
        t2 = time.perf_counter()
        m.advance(token)
        t3 = time.perf_counter()
        fills.append(t1 - t0)
        applies.append((t2 - t1) - (t0 - t))
        advances.append(t3 - t2)
    return statistics.median(fills), statistics.median(applies), statistics.median(advances)


def decode_step_seconds(folder: Path, steps: int = 12) -> float:
    """Median seconds of one batch-1 decode step of the model (argmax included)."""
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    model, _ = load(str(folder))
    cache = make_prompt_cache(model)
    y = mx.array([[5] * 16])
    mx.eval(model(y, cache=cache))
    times = []
    token = mx.array([[7]])
    for _ in range(steps):
        t0 = time.perf_counter()
        token = mx.argmax(model(token, cache=cache)[:, -1, :], axis=-1)[:, None]
        mx.eval(token)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_vocab(label, tokens, eos, specials, vocab_size, step_s, args, results):
    print(
        f"\n== {label}: vocabulary {len(tokens)} tokens (model rows {vocab_size}); "
        f"one decode step of the model: {step_s * 1e3:.2f} ms",
        flush=True,
    )
    print(
        f"{'engine':14} {'grammar':12} {'tok.prep ms':>11} {'compile ms':>10} {'mask us':>9} "
        f"{'apply us':>9} {'advance us':>10} {'total us':>9} {'% step':>7}"
    )
    for name in args.engines:
        t0 = time.perf_counter()
        engine = ENGINES[name](tokens, eos, specials, vocab_size)
        prep = time.perf_counter() - t0
        for gname, schema in GRAMMARS.items():
            t0 = time.perf_counter()
            try:
                compiled = engine.compile(schema)
            except Exception as exc:  # an engine that cannot compile a grammar is a result too
                print(f"{name:14} {gname:12} failed: {type(exc).__name__}: {str(exc)[:80]}")
                continue
            compile_s = time.perf_counter() - t0
            fill, apply, advance = walk(engine, compiled, vocab_size, args.tokens)
            total = fill + apply + advance
            results.append(
                dict(
                    vocab=label,
                    engine=name,
                    grammar=gname,
                    tokenizer_prep_ms=prep * 1e3,
                    compile_ms=compile_s * 1e3,
                    mask_us=fill * 1e6,
                    apply_us=apply * 1e6,
                    advance_us=advance * 1e6,
                    total_us=total * 1e6,
                    ratio_to_step=total / step_s,
                    decode_step_ms=step_s * 1e3,
                )
            )
            print(
                f"{name:14} {gname:12} {prep * 1e3:11.1f} {compile_s * 1e3:10.1f} {fill * 1e6:9.1f} "
                f"{apply * 1e6:9.1f} {advance * 1e6:10.1f} {total * 1e6:9.1f} {100 * total / step_s:7.2f}",
                flush=True,
            )


def engine_overhead(label, folder: Path, batches, items: int, rounds: int, results):
    """Decode time per token of omlx's engine with structured rows against the same number of
    plain greedy tokens, side by side (alternating) in one engine."""
    from inference.engine import LLM, SamplingParams

    schema = {
        "type": "array",
        "items": {"type": "integer", "minimum": 0, "maximum": 9},
        "minItems": items,
        "maxItems": items,
    }
    structured = SamplingParams(
        temperature=0, max_tokens=4 * items + 8, structured={"type": "json_schema", "schema": schema}
    )
    prompts = [f"prompt number {i}" for i in range(max(batches))]
    print(
        f"\n== engine, {label}: decode ms per step (median gap between a stream's tokens), plain "
        f"greedy vs structured (JSON array of {items} integers), median of {rounds} alternating rounds",
        flush=True,
    )
    print(f"{'batch':>5} {'tokens':>6} {'plain ms':>9} {'structured ms':>13} {'ratio':>6}")
    with LLM(folder, max_concurrent_requests=max(batches)) as llm:
        n = len(llm.generate(prompts[:1], structured)[0].token_ids)
        plain = SamplingParams(temperature=0, ignore_eos=True, max_tokens=n)
        llm.generate(prompts[:1], plain)

        def per_step(params, b):
            """Median gap between consecutive tokens of a stream (robust to a noisy machine)."""
            import threading

            stamps = [[] for _ in range(b)]
            done = threading.Semaphore(0)

            def sink(i):
                def put(event):
                    stamps[i].append(time.perf_counter())
                    if event.finished:
                        done.release()

                return put

            for i in range(b):
                llm.engine.submit(prompts[i], params, callback=sink(i))
            for _ in range(b):
                done.acquire()
            return statistics.median(t1 - t0 for ts in stamps for t0, t1 in zip(ts[1:-1], ts[2:-1]))

        for b in batches:
            pairs = []
            for i in range(rounds):
                order = [(plain, 0), (structured, 1)][:: 1 if i % 2 == 0 else -1]
                t = {}
                for params, k in order:
                    t[k] = per_step(params, b)
                pairs.append((t[0], t[1]))
            p = statistics.median(a for a, _ in pairs)
            st = statistics.median(b_ for _, b_ in pairs)
            ratio = statistics.median(b_ / a for a, b_ in pairs)
            results.append(
                dict(
                    engine_model=label,
                    batch=b,
                    tokens=n,
                    plain_step_ms=p * 1e3,
                    structured_step_ms=st * 1e3,
                    ratio=ratio,
                )
            )
            print(f"{b:5d} {n:6d} {p * 1e3:9.2f} {st * 1e3:13.2f} {ratio:6.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=200, help="tokens per walk (default 200)")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated subset")
    parser.add_argument("--skip-large", action="store_true", help="only the tiny vocabulary")
    parser.add_argument("--skip-engine", action="store_true", help="skip the engine-level comparison")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the engine-level comparison")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    args.engines = [e for e in args.engines.split(",") if e]
    results = []

    tiny = model_folder("tiny")
    tokens, eos, specials = tokenizer_vocab(tiny)
    run_vocab(
        "tiny",
        tokens,
        eos,
        specials,
        json.loads((tiny / "config.json").read_text())["vocab_size"],
        decode_step_seconds(tiny),
        args,
        results,
    )
    if not args.skip_large:
        big = model_folder("qwen2.5-0.5b")
        size = json.loads((big / "config.json").read_text())["vocab_size"]
        tokens, eos, specials = synthetic_vocab(size)
        run_vocab("qwen2.5-size", tokens, eos, specials, size, decode_step_seconds(big), args, results)
    if not args.skip_engine:
        engine_overhead("tiny", tiny, (1, 8), 40, args.rounds, results)
        if not args.skip_large:
            engine_overhead("qwen2.5-0.5b", model_folder("qwen2.5-0.5b"), (1, 8), 12, args.rounds, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
