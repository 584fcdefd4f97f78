"""Speculative decoding (prompt lookup, suffix decoding) against plain decoding, side by side in
one run, on the real SmolLM2-135M-Instruct (issue 27).

Workloads, greedy, each run with speculation off and with ``lookup`` in alternating rounds on
one engine (the prompt's KV comes from the block cache after the first round, so rounds time
decoding, not the prompt), on a float32 copy of the weights (``--quantized``: the Q4 import):

- ``edit``: the prompt holds a Python file of ``--lines`` lines and asks for it back with a few
  changes; the answer copies long runs of the prompt (what an agent editing a file does);
- ``free``: a short question answered in free text: little to copy, so the adaptive rule
  should keep speculation from costing anything;
- ``edit x16``: 16 edit streams at once (the same file, each asking for its own change), the
  batch speculating together;
- ``edit-servers`` (only with ``--only edit-servers``): the edit workload over HTTP, `omlx serve`
  with lookup next to `mlx_lm.server` on the same folder, both real processes
  (``bench_edit_servers``);
- ``draft`` (only with ``--only draft``): a draft model next to mlx-lm's own
  ``speculative_generate_step`` with the same pair and k (``bench_draft_model``).
- ``repeat``: answers that repeat across conversations (an agent re-running a step, sub-agents
  or users asking the same): a question is answered once with ``suffix`` (its answer goes to the
  model's answers), then asked again, by the same conversation (``again``) and under another
  system prompt (``variant``), with speculation off, ``lookup`` and ``suffix`` in alternating
  order. Each round has its own cache salt, so ``suffix`` drafts only from that round's answers.

Printed per workload: decode tokens per second (output tokens after the first, over the time
from the first token to the last, summed over the streams) with and without, their ratio, and
whether the outputs are identical token for token (they must be: greedy). The ratios are the
figures of docs/benchmarks.md.

    .venv/bin/python benchmarks/bench_speculative.py [--tokens 200] [--rounds 2] [--lines 300] [--quantized]
        [--only edit|free|streams|repeat|draft|edit-servers]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from inference.engine import LLM, SamplingParams  # noqa: E402


def smollm2_folder() -> Path:
    """The imported SmolLM2 folder (tests/reference/test_smollm2.py imports it under $OMLX_HOME)."""
    import os

    home = Path(os.environ.get("OMLX_HOME", "/tmp/omlx-shared-smollm2"))
    found = sorted((home / "test-models").glob("smollm2-gguf-*/models/smollm2/config.json"))
    if not found:
        sys.exit(f"no SmolLM2 under {home}/test-models: run tests/reference/test_smollm2.py first")
    return found[-1].parent


def float32_copy(folder: Path) -> Path:
    """A dequantized float32 copy of ``folder`` (made once, next to it under $OMLX_HOME): on the
    CPU, MLX's quantized matmul costs a multi-token pass about its tokens times a one-token
    pass, so a verify pass of k + 1 tokens cannot pay there; float32 goes through the BLAS, where
    it costs little more than one token (docs/engine.md#speculative-decoding)."""
    out = folder.parent.parent / "smollm2-float32"
    if not (out / "config.json").exists():
        from mlx_lm.convert import convert

        convert(str(folder), str(out), dequantize=True)
    return out


def source_file(lines: int, seed: int) -> str:
    """A Python file of about ``lines`` lines: small functions and a table."""
    out, i = [f'"""Module {seed}: helpers for the inventory service."""', "", "import math", ""], 0
    while len(out) < lines:
        name = ["price", "weight", "volume", "discount", "stock", "margin"][(i + seed) % 6]
        out += [
            f"def {name}_{i}(item, factor={i % 7 + 1}):",
            f'    """Return the {name} of ``item`` scaled by ``factor``."""',
            f"    value = item.get('{name}', 0) * factor",
            f"    return round(value + {i * 3 % 11}, 2)",
            "",
        ]
        i += 1
    return "\n".join(out[:lines])


def edit_text(lines: int, stream: int = 0) -> str:
    """The file, then the change asked for (stream ``stream`` asks for its own: the streams
    share the file's KV through the block cache, as an agent's parallel edits would)."""
    return (
        "Here is a Python file:\n\n```python\n" + source_file(lines, 0) + "\n```\n\n"
        f"Copy the whole file exactly as it is, but rename `import math` to `import cmath{stream or ''}`. "
        "Output only the code."
    )


def edit_prompt(tokenizer, lines: int, stream: int = 0) -> list:
    """``edit_text`` as the chat template's prompt tokens."""
    ask = edit_text(lines, stream)
    return tokenizer.apply_chat_template([{"role": "user", "content": ask}], add_generation_prompt=True)


def free_prompt(tokenizer) -> list:
    ask = "Tell me a short story about a lighthouse keeper who finds a message in a bottle."
    return tokenizer.apply_chat_template([{"role": "user", "content": ask}], add_generation_prompt=True)


QUESTION = "Write a Python function that checks whether a number is prime, with a docstring."
SYSTEMS = ("You are a helpful assistant.", "You are a helpful assistant working for the docs team.")


def chat_prompt(tokenizer, system: str, question: str) -> list:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True)


def run(llm, prompts, tokens: int, method: str, salt=None, k=None):
    """(decode tokens per second over the streams, their token ids); ``k``: the requests'
    ``num_draft_tokens`` (None: the engine's)."""
    params = SamplingParams(
        max_tokens=tokens, temperature=0, ignore_eos=True, speculative=method, num_draft_tokens=k
    )
    start = time.perf_counter()
    results = llm.generate(prompts, [params] * len(prompts), cache_salt=salt)
    wall = time.perf_counter() - start
    first = min(r.time_to_first_token for r in results)
    decoded = sum(len(r.token_ids) - 1 for r in results)
    return decoded / (wall - first), [r.token_ids for r in results]


def compare(llm, name, prompts, tokens, rounds, k=None):
    run(llm, prompts, 8, "off")  # the prompts into the block cache
    speeds = {"off": [], "lookup": []}
    outputs = {}
    before = llm.engine.stats().speculative
    for i in range(rounds):
        for method in ("off", "lookup") if i % 2 == 0 else ("lookup", "off"):
            speed, ids = run(llm, prompts, tokens, method, k=k)
            speeds[method].append(speed)
            outputs[method] = ids
    after = llm.engine.stats().speculative
    off, on = statistics.median(speeds["off"]), statistics.median(speeds["lookup"])
    drafted = after["drafted_tokens"] - before["drafted_tokens"]
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    passes = after["verify_passes"] - before["verify_passes"]
    emitted = after["emitted_tokens"] - before["emitted_tokens"]
    print(
        f"{name:10s} off {off:7.1f} tok/s   lookup {on:7.1f} tok/s   ratio {on / off:5.2f}x   "
        f"identical {outputs['off'] == outputs['lookup']}   "
        f"accepted {accepted}/{drafted}   tokens/pass {emitted / passes if passes else 0:.2f}",
        flush=True,
    )
    return on / off


def compare_repeat(llm, tokens: int, rounds: int) -> None:
    """The ``repeat`` workload: per case, the median decode speed of each method and the ratios
    of ``suffix`` to off and to ``lookup``."""
    tok = llm.tokenizer
    first = chat_prompt(tok, SYSTEMS[0], QUESTION)
    cases = {"again": first, "variant": chat_prompt(tok, SYSTEMS[1], QUESTION)}
    methods = ("off", "lookup", "suffix")
    speeds = {(case, m): [] for case in cases for m in methods}
    outputs, counts = {}, {m: [0, 0, 0, 0] for m in methods}
    for i in range(rounds):
        salt = f"repeat-{i}-{time.time()}"  # this round's answers only (and its own block cache)
        run(llm, [first], tokens, "suffix", salt)  # the earlier answer
        for case, prompt in cases.items():
            for m in methods if i % 2 == 0 else methods[::-1]:
                before = llm.engine.stats().speculative
                speed, ids = run(llm, [prompt], tokens, m, salt)
                after = llm.engine.stats().speculative
                speeds[case, m].append(speed)
                outputs[case, m] = ids
                keys = ("accepted_tokens", "drafted_tokens", "emitted_tokens", "verify_passes")
                counts[m] = [c + after[k] - before[k] for c, k in zip(counts[m], keys)]
    for case in cases:
        off, look, suf = (statistics.median(speeds[case, m]) for m in methods)
        same = outputs[case, "off"] == outputs[case, "lookup"] == outputs[case, "suffix"]
        print(
            f"repeat {case:8s} off {off:6.1f}  lookup {look:6.1f}  suffix {suf:6.1f} tok/s   "
            f"suffix/off {suf / off:5.2f}x   suffix/lookup {suf / look:5.2f}x   "
            f"lookup/off {look / off:5.2f}x   identical {same}",
            flush=True,
        )
    for m in methods[1:]:
        accepted, drafted, emitted, passes = counts[m]
        per_pass = emitted / passes if passes else 0
        print(
            f"repeat {m:8s} accepted {accepted}/{drafted}   tokens/pass {per_pass:.2f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=200, help="output tokens per stream")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lines", type=int, default=300, help="lines of the file in the edit prompt")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument(
        "--only", choices=("edit", "free", "streams", "repeat", "draft", "edit-servers"), action="append"
    )
    parser.add_argument("--k", type=int, default=4, help="draft: num_draft_tokens of both")
    parser.add_argument(
        "--lookup-k",
        type=int,
        help="edit, free, streams: lookup's num_draft_tokens (default the engine's, 4)",
    )
    parser.add_argument("--layers", type=int, default=8, help="draft: layers of the smaller draft")
    parser.add_argument("--draft-dir", default="/tmp/omlx-bench-drafts", help="draft: where it is made")
    parser.add_argument(
        "--draft-workload", choices=("edit", "free"), action="append", help="draft: default both"
    )
    parser.add_argument("--quantized", action="store_true", help="the imported Q4 weights, not float32")
    args = parser.parse_args()
    only = args.only or ["edit", "free", "streams", "repeat"]
    folder = smollm2_folder() if args.quantized else float32_copy(smollm2_folder())
    if "draft" in only:  # (d): a draft model, omlx next to mlx-lm's speculative_generate_step
        import bench_draft_model

        makers = {"edit": lambda tok: edit_prompt(tok, args.lines), "free": free_prompt}
        makers = {name: makers[name] for name in args.draft_workload or makers}
        bench_draft_model.main(folder, makers, args)
        only = [name for name in only if name != "draft"]
    if "edit-servers" in only:  # (a) over HTTP: omlx serve with lookup next to mlx_lm.server
        import bench_edit_servers

        bench_edit_servers.main(folder, edit_text(args.lines), args)
        only = [name for name in only if name != "edit-servers"]
    if not only:
        return
    with LLM(folder, max_concurrent_requests=max(16, args.streams), step_token_budget=4096) as llm:
        tok = llm.tokenizer
        print(f"SmolLM2 {folder}; {args.tokens} tokens a stream, {args.rounds} rounds, median", flush=True)
        if "edit" in only:
            compare(llm, "edit", [edit_prompt(tok, args.lines)], args.tokens, args.rounds, args.lookup_k)
        if "free" in only:
            compare(llm, "free", [free_prompt(tok)], args.tokens, args.rounds, args.lookup_k)
        if "streams" in only:
            prompts = [edit_prompt(tok, args.lines, s) for s in range(args.streams)]
            compare(llm, f"edit x{args.streams}", prompts, args.tokens // 4, args.rounds, args.lookup_k)
        if "repeat" in only:
            compare_repeat(llm, args.tokens, args.rounds)


if __name__ == "__main__":
    main()
