"""Quantized KV (``--kv-bits``): what it saves and what it costs, side by side in one run.

  bytes    tokens per GB of the RAM tier and of the SSD tier for float KV and 8- and 4-bit KV
           (group 64), measured on the blocks an engine holds after one prompt (RAM: the
           arrays' bytes; SSD: the block files' sizes, headers included), with the model in
           float16 and in float32 (the CPU default): ratio to float16 KV and to the same
           dtype's float KV. Also a float model with ``--paged-ssd-cache-bits``. The model is
           a factory llama with SmolLM2-135M's KV geometry (30 layers, 3 KV heads of 64) and
           small other layers: the bytes depend on that geometry only, and its prefill is fast
           in any dtype (float16 matmul is slow on a CPU).
  restore  restoring an N-token prefix (default 4,096) from the SSD tier (the same model): the hot tier is
           cleared and the block files dropped from the OS page cache before each read
           (``posix_fadvise(DONTNEED)`` per file: dropping the whole page cache needs root);
           the time of the lookup that reads and assembles them, quantized vs float KV, the
           median of per-round ratios (rounds alternate the order).
  quality  SmolLM2-135M-Instruct (float32 weights, dequantized from the tests' import): the
           perplexity over inference/bench/data/perplexity.txt with float, 8-bit and 4-bit KV;
           greedy agreement with float KV over 512 tokens (teacher-forced: the share of
           positions of float KV's greedy continuation where the quantized KV's top token is
           the same; free-running: the first position where greedy output differs); a
           retrieval probe (a sentence with a number at 10%, 50% and 90% of ~7K tokens of
           filler, then the question); factory models (random weights, head dim 64):
           teacher-forced agreement only.
  probe    the retrieval probe alone, at ``--tokens`` (default 7000), for ``--probe-formats``
           at ``--probe-depths``, with the seconds each probe took. The probe's attention runs
           on omlx's CPU path over the caches' keys and values, quantized ones dequantized
           first (``blas_attention``; the quality section's probe too): MLX's quantized
           attention takes 2-3x as long on this CPU; the values attended are the same.

    .venv/bin/python benchmarks/bench_kv_quant.py [--quick] [--smollm2 DIR] [--rounds 3]
                                                  [--sections bytes restore quality]
                                                  [--context 7000] [--agree-tokens 512]
    .venv/bin/python benchmarks/bench_kv_quant.py --sections probe --tokens 7000 \
                                                  [--probe-depths 0.1 0.5 0.9] [--probe-formats float 4-bit]

``--smollm2`` is the MLX folder the tests import (default: the newest
``$OMLX_HOME/test-models/smollm2-gguf-*/models/smollm2``); it is dequantized to float32 once into
benchmarks/out/models/. ``--quick``: a 1,024-token restore, 128-token agreement, a ~2K probe.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from benchmarks.rounds import Comparison, order, ratio_table  # noqa: E402

FORMATS = {
    "float": {},
    "8-bit": dict(kv_bits=8, kv_group_size=64),
    "4-bit": dict(kv_bits=4, kv_group_size=64),
}
SSD_BITS = {
    "float, SSD 8-bit": dict(paged_ssd_cache_bits=8),
    "float, SSD 4-bit": dict(paged_ssd_cache_bits=4),
}
GB = 10**9


def smollm2_float(source: str = None) -> Path:
    """A float32 copy of the tests' SmolLM2 import (mlx-lm's converter, ``dequantize``)."""
    from mlx_lm.convert import convert

    out = REPO / "benchmarks" / "out" / "models" / "smollm2-f32"
    if (out / "config.json").exists():
        return out
    if source is None:
        home = Path(os.environ.get("OMLX_HOME", "/tmp/omlx-shared-smollm2"))
        found = sorted((home / "test-models").glob("smollm2-gguf-*/models/smollm2"), key=os.path.getmtime)
        if not found:
            sys.exit(
                "no SmolLM2 import found: run tests/reference/test_smollm2.py once, or pass --smollm2 DIR"
            )
        source = found[-1]
    print(f"dequantizing {source} to float32 in {out} ...", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    convert(str(source), str(out), dequantize=True, dtype="float32")
    return out


def ids(n, seed=0):
    import random

    rng = random.Random(seed)
    return [rng.randrange(10, 1000) for _ in range(n)]


def kv_shape_model() -> Path:
    """A factory llama with SmolLM2-135M-Instruct's KV geometry and little else."""
    from inference.testkit.registry import build_model

    path = REPO / "benchmarks" / "out" / "models" / "llama-smollm2-kv-shape"
    if not (path / "config.json").exists():
        build_model(
            path,
            arch="llama",
            preset="tiny",
            hidden_size=192,
            num_attention_heads=3,
            num_key_value_heads=3,
            num_hidden_layers=30,
            intermediate_size=128,
            max_position_embeddings=8192,
        )
    return path


def engine(path, root, **settings):
    from inference.engine import LLM

    return LLM(path, cache_block_size=256, paged_ssd_cache_dir=str(root), **settings)


def fill(llm, prompt):
    from inference.engine import SamplingParams

    llm.generate([prompt], SamplingParams(max_tokens=1, temperature=0, ignore_eos=True))
    llm.engine.call(lambda e: e.prefix_cache.cold.flush())


# -- bytes ------------------------------------------------------------------------------------------


def section_bytes(path, tokens):
    """Bytes per token of the blocks held. float32: every format run by an engine. float16:
    MLX's quantized attention in float16 is about 150x slower than in float32 on a CPU, so the
    8- and 4-bit rows take the float16 engine's blocks quantized as a quantized model stores
    them (``ColdQuantizer``: the same ``mx.quantize``, scales and biases in float16) for RAM,
    and the files of the float16 engine with ``--paged-ssd-cache-bits`` (the same file format)
    for SSD."""
    from cache.cold_quant import ColdQuantizer

    prompt = ids(tokens, 1)
    rows, notes = {}, {}

    def measure(dtype, kv):
        with tempfile.TemporaryDirectory() as root:
            with engine(path, root, dtype=dtype, **kv) as llm:
                fill(llm, prompt)
                blocks = list(llm.engine.prefix_cache.hot.blocks())
                count = sum(len(b.token_ids) for b in blocks)
                hot = sum(b.nbytes for b in blocks) / count
                files = list(Path(root).rglob("*.safetensors"))
                ssd = sum(f.stat().st_size for f in files) / tokens
                return hot, ssd, blocks, count

    for name, kv in {**FORMATS, **SSD_BITS}.items():
        rows["float32", name] = measure("float32", kv)[:2]
    hot, ssd, blocks, count = measure("float16", {})
    rows["float16", "float"] = (hot, ssd)
    for name, bits in (("8-bit", 8), ("4-bit", 4)):
        coder = ColdQuantizer(f"q{bits}g64")
        quantized = [coder.encode(b.layers, [("full", 0)] * len(b.layers)) for b in blocks]
        ram = sum(a.nbytes for layers in quantized for layer in layers for a in layer) / count
        files = measure("float16", dict(paged_ssd_cache_bits=bits))[1]
        rows["float16", name] = (ram, files)
        notes["float16", name] = " (a)"
    base = rows["float16", "float"]
    print(f"\n### Tokens per GB (bytes measured on the blocks of a {tokens}-token prompt)\n")
    print(
        "| KV dtype | format | RAM bytes/token | SSD bytes/token | RAM tokens/GB | SSD tokens/GB "
        "| RAM vs float16 KV | SSD vs float16 KV | RAM vs same dtype | SSD vs same dtype |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (dtype, name), (hot, ssd) in sorted(rows.items()):
        same = rows[dtype, "float"]
        print(
            f"| {dtype} | {name}{notes.get((dtype, name), '')} | {hot:,.0f} | {ssd:,.0f} | {GB / hot:,.0f} "
            f"| {GB / ssd:,.0f} | {base[0] / hot:.2f}x | {base[1] / ssd:.2f}x | {same[0] / hot:.2f}x "
            f"| {same[1] / ssd:.2f}x |",
            flush=True,
        )
    print("\n(a) float16 KV quantized as a quantized model stores it (see section_bytes)")
    return rows


# -- restore ----------------------------------------------------------------------------------------


def section_restore(path, tokens, rounds, names=("float", "8-bit", "4-bit", "float, SSD 4-bit")):
    from cache.probe import drop_cached

    prompt = ids(tokens + 1, 2)
    names = ["float"] + [n for n in names if n != "float"]
    settings = {**FORMATS, **SSD_BITS}
    roots = {name: Path(tempfile.mkdtemp(prefix="kvq-")) for name in names}
    engines = {}
    try:
        for name in names:
            engines[name] = engine(path, roots[name], **settings[name])
            fill(engines[name], prompt)
        dropped = True

        def read(name):
            nonlocal dropped
            llm = engines[name]
            llm.engine.call(lambda e: e.prefix_cache.clear_hot())
            for f in roots[name].rglob("*.safetensors"):
                dropped = drop_cached(f) and dropped

            def look(e):
                began = time.perf_counter()
                hit = e.prefix_cache.lookup(prompt, tokens)
                seconds = time.perf_counter() - began
                got = (hit.num_tokens, hit.cold_tokens) if hit else (0, 0)
                if hit:
                    e.prefix_cache.release(hit)
                return seconds, got

            seconds, got = llm.engine.call(look)
            if got != (tokens, tokens):
                raise RuntimeError(f"{name}: expected {tokens} tokens from the SSD tier, got {got}")
            return seconds

        times = {name: [] for name in names}
        for r in range(rounds):
            for name in order(names, r):
                times[name].append(read(name))
        comparisons = []
        for name in names[1:]:
            c = Comparison(f"{name} / float", invert=False)
            for ours, theirs in zip(times[name], times["float"]):
                c.add(ours, theirs)
            comparisons.append(c)
        print(f"\n### SSD restore of a {tokens:,}-token prefix (page cache dropped: {dropped})\n")
        print(
            ratio_table(comparisons, "this format, s", "float KV, s", "time ratio", lambda c, v: f"{v:.3f}")
        )
        return comparisons
    finally:
        for llm in engines.values():
            llm.close()
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


# -- quality ----------------------------------------------------------------------------------------


def caches(model, kv):
    from inference.engine import quantized_kv
    from inference.engine.kv_quant import KVQuant

    return quantized_kv.make_cache(model, KVQuant(kv["kv_bits"], kv["kv_group_size"]) if kv else None)


def greedy(model, prompt, n, kv):
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    steps = generate_step(mx.array(prompt), model, max_tokens=n, prompt_cache=caches(model, kv))
    return [int(t) for t, _ in steps]


def teacher_forced(model, prompt, continuation, kv):
    """(share of positions of ``continuation`` where the model's top token over ``kv`` caches,
    given the prompt and the continuation before it, is the continuation's token; the first
    position where it is not, None if none). The first is where free-running greedy output over
    ``kv`` would leave ``continuation``: up to there both compute the same thing."""
    import mlx.core as mx

    cache = caches(model, kv)
    model(mx.array([prompt[:-1]]), cache=cache)
    logits = model(mx.array([[prompt[-1]] + continuation[:-1]]), cache=cache)[0]
    top = mx.argmax(logits, axis=-1).tolist()
    same = [a == b for a, b in zip(top, continuation)]
    first = next((i for i, ok in enumerate(same) if not ok), None)
    return sum(same) / len(continuation), first


@contextmanager
def blas_attention(model):
    """The model's attention on omlx's CPU path (``cpu_attention.attention``: one BLAS product
    per KV head, as the engine attends over float KV on a CPU), over what its caches hold, a
    quantized cache's keys and values dequantized first (``mx.dequantize``: the very values
    mlx-lm's quantized attention multiplies, summed in another order). MLX's quantized attention
    takes 2-3x this path's time on this CPU (a 1,024-token prefill: 105 s against 36 s)."""
    import mlx.core as mx

    from inference.engine import cpu_attention

    module = sys.modules[type(model).__module__]
    original = module.scaled_dot_product_attention

    def attend(queries, keys, values, cache, scale, mask, sinks=None):
        if sinks is not None:
            return original(queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks)
        if hasattr(cache, "bits"):
            keys = mx.dequantize(*keys, group_size=cache.group_size, bits=cache.bits)
            values = mx.dequantize(*values, group_size=cache.group_size, bits=cache.bits)
        return cpu_attention.attention(queries, keys, values, scale, mask)

    module.scaled_dot_product_attention = attend
    try:
        yield
    finally:
        module.scaled_dot_product_attention = original


def probe(model, tokenizer, context, depth, kv):
    """(whether greedy output after a ~``context``-token filler with a fact at ``depth`` names it,
    the end of the answer, the prompt's tokens, seconds)."""
    from inference.bench import perplexity

    filler = tokenizer.encode(perplexity.text())
    fact = tokenizer.encode(" The access code for the blue door is 4817. ")
    body = (filler * (context // len(filler) + 1))[: context - len(fact)]
    at = int(len(body) * depth)
    text = tokenizer.decode(body[:at] + fact + body[at:])
    messages = [{"role": "user", "content": text + "\n\nWhat is the access code for the blue door?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    began = time.perf_counter()
    with blas_attention(model):
        answer = tokenizer.decode(greedy(model, prompt, 24, kv))
    seconds = time.perf_counter() - began
    said = answer.strip().replace("\n", " ").replace("|", "\\|")[-24:]
    return "4817" in answer, said, len(prompt), seconds


def section_probe(path, context, depths=(0.1, 0.5, 0.9), formats=tuple(FORMATS)):
    """The retrieval probe alone: each KV format at each depth (the prompt's prefill once per
    format and depth, in mlx-lm's 2,048-token steps)."""
    from mlx_lm.utils import load

    model, tokenizer = load(str(path))
    print(f"\n### Retrieval probe, SmolLM2-135M-Instruct (float32 weights), ~{context:,} tokens\n")
    head = " | ".join(f"{int(100 * d)}%" for d in depths)
    print(f"| KV | {head} | prompt tokens | seconds per probe |")
    print("|---|" + "---|" * len(depths) + "---:|---:|")
    out = {}
    for name in formats:
        found = [probe(model, tokenizer, context, depth, FORMATS[name]) for depth in depths]
        cells = " | ".join(("found" if ok else "missed") + f" ({said!r})" for ok, said, _, _ in found)
        tokens = "/".join(f"{n:,}" for _, _, n, _ in found)
        seconds = " ".join(f"{t:.0f}" for *_, t in found)
        print(f"| {name} | {cells} | {tokens} | {seconds} |", flush=True)
        out[name] = found
    return out


def section_quality(path, agree_tokens, context, factory):
    from mlx_lm.utils import load

    from inference.bench import perplexity

    model, tokenizer = load(str(path))
    text_ids = tokenizer.encode(perplexity.text())
    messages = [{"role": "user", "content": "Write a short story about a lighthouse keeper and a storm."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    saved = REPO / "benchmarks" / "out" / f"kvq-reference-{agree_tokens}.json"  # float KV's greedy output
    if saved.exists():
        reference = json.loads(saved.read_text())
    else:
        reference = greedy(model, prompt, agree_tokens, {})
        saved.write_text(json.dumps(reference))
    print(f"\n### SmolLM2-135M-Instruct (float32 weights), {len(text_ids) - 1} scored tokens\n")
    print(
        "| KV | perplexity | vs float KV | teacher-forced agreement | greedy output first differs at "
        f"| probe at {context:,} tokens: 10% | 50% | 90% |"
    )
    print("|---|---:|---:|---:|---:|---|---|---|")
    base = None
    out = {}
    for name, kv in FORMATS.items():
        ppl = perplexity.perplexity_of(perplexity.token_logprobs(model, text_ids, cache=caches(model, kv)))
        base = base or ppl
        agree, diff = teacher_forced(model, prompt, reference, kv)
        found = [probe(model, tokenizer, context, depth, kv)[:2] for depth in (0.1, 0.5, 0.9)]
        cells = " | ".join(("found" if ok else "missed") + f" ({said!r})" for ok, said in found)
        where = "never" if diff is None else str(diff)
        print(
            f"| {name} | {ppl:.3f} | {100 * (ppl / base - 1):+.2f}% | {100 * agree:.1f}% "
            f"| {where} of {agree_tokens} | {cells} |",
            flush=True,
        )
        out[name] = dict(perplexity=ppl, agreement=agree, first_difference=diff, probe=found)
    if factory:
        section_factory(agree_tokens)
    return out


def section_factory(n):
    from mlx_lm.utils import load

    from inference.testkit.registry import build_model

    print(f"\n### Factory models (random weights, head dim 64): teacher-forced agreement over {n} tokens\n")
    print("| family | 8-bit | 4-bit |")
    print("|---|---:|---:|")
    for arch in ("qwen2", "llama", "qwen3"):
        folder = REPO / "benchmarks" / "out" / "models" / f"{arch}-tiny-hd64"
        if not (folder / "config.json").exists():
            build_model(
                folder,
                arch=arch,
                preset="tiny",
                hidden_size=128,
                num_attention_heads=2,
                num_key_value_heads=1,
            )
        model, _ = load(str(folder))
        prompt = ids(64, 3)
        reference = greedy(model, prompt, n, {})
        cells = [
            f"{100 * teacher_forced(model, prompt, reference, FORMATS[k])[0]:.1f}%"
            for k in ("8-bit", "4-bit")
        ]
        print(f"| {arch} | {' | '.join(cells)} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smollm2", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sections", nargs="+", default=["bytes", "restore", "quality"])
    parser.add_argument(
        "--context", "--tokens", type=int, default=None, help="tokens of the retrieval probe (default 7000)"
    )
    parser.add_argument("--agree-tokens", type=int, default=None, help="tokens of greedy agreement")
    parser.add_argument("--restore-formats", nargs="+", default=["8-bit", "4-bit", "float, SSD 4-bit"])
    parser.add_argument("--probe-depths", nargs="+", type=float, default=[0.1, 0.5, 0.9])
    parser.add_argument("--probe-formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    args = parser.parse_args()
    import mlx.core as mx

    print(f"mlx {mx.__version__}; quick={args.quick}", flush=True)
    if "bytes" in args.sections:
        section_bytes(kv_shape_model(), 512)
    if "restore" in args.sections:
        section_restore(kv_shape_model(), 1024 if args.quick else 4096, args.rounds, args.restore_formats)
    if "quality" in args.sections:
        agree = args.agree_tokens or (128 if args.quick else 512)
        context = args.context or (2000 if args.quick else 7000)
        section_quality(smollm2_float(args.smollm2), agree, context, factory=True)
    if "probe" in args.sections:
        context = args.context or (2000 if args.quick else 7000)
        section_probe(smollm2_float(args.smollm2), context, args.probe_depths, args.probe_formats)


if __name__ == "__main__":
    main()
