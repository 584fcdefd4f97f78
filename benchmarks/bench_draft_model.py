"""Speculative decoding with a draft model: omlx's engine next to mlx-lm's own
``speculative_generate_step`` with the same target, the same draft and the same k, one greedy
stream, side by side in alternating rounds (issue 27, benchmark (d)).

The target is the float32 copy of the real SmolLM2-135M-Instruct (``bench_speculative``); the
drafts are that model itself (every draft accepted, each costing a pass of the target) and
SmolLM2 cut to its first ``--layers`` layers (a smaller model of the same tokenizer, made once
under ``--draft-dir``). Printed per pair and workload: decode tokens per second (output tokens
after the first, over the time from the first token to the last) of omlx and of mlx-lm, their
ratio, omlx's acceptance (drafted tokens kept), how many of its tokens came from verify passes
and tokens per verify pass, and whether the outputs are plain greedy decoding's token for
token. omlx runs twice: as it serves (the adaptive rule turns drafting off where a verify step,
drafting included, costs more than the tokens it gives) and "always" (no cost test: every row
drafts whenever it has a draft, as mlx-lm does), to compare the drafting itself.

    .venv/bin/python benchmarks/bench_speculative.py --only draft [--tokens 200] [--rounds 2]
        [--k 4] [--layers 8] [--lines 300]
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

import mlx.core as mx

from inference.engine import LLM, SamplingParams
from inference.engine.model_loader import load_model


def truncated_copy(folder: Path, layers: int, out_dir: Path) -> Path:
    """``folder`` with only its first ``layers`` decoder layers (the embedding, final norm and
    head kept): a smaller model of the same tokenizer, written once to ``out_dir``."""
    out = out_dir / f"{folder.name}-{layers}-layers"
    if (out / "config.json").exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    weights = {}
    for path in sorted(folder.glob("model*.safetensors")):
        for name, value in mx.load(str(path)).items():
            parts = name.split(".")
            if "layers" in parts and int(parts[parts.index("layers") + 1]) >= layers:
                continue
            weights[name] = value
    mx.save_safetensors(str(tmp / "model.safetensors"), weights)
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for path in folder.iterdir():
        if path.suffix in (".json", ".jinja") and path.name not in (
            "config.json",
            "model.safetensors.index.json",
        ):
            shutil.copy(path, tmp / path.name)
    tmp.rename(out)
    return out


def omlx_run(llm, prompt, tokens: int, k: int, always: bool = False):
    """(decode tokens per second, token ids) of one stream drafting with the attached draft;
    ``always``: without the adaptive rule's cost test (rows draft whenever they have a draft)."""
    policy = llm.engine.runner.speculation
    costs = policy.costs
    if always:
        llm.engine.call(lambda engine: setattr(policy, "costs", None))
    params = SamplingParams(
        max_tokens=tokens, temperature=0, ignore_eos=True, speculative="draft", num_draft_tokens=k
    )
    start = time.perf_counter()
    result = llm.generate([prompt], params)[0]
    wall = time.perf_counter() - start
    llm.engine.call(lambda engine: setattr(policy, "costs", costs))
    return (len(result.token_ids) - 1) / (wall - result.time_to_first_token), list(result.token_ids)


def mlx_lm_run(model, draft, prompt, tokens: int, k: int):
    """(decode tokens per second, token ids, how many came from drafts) of mlx-lm's
    speculative_generate_step, greedy."""
    from mlx_lm.generate import speculative_generate_step

    ids, first, drafted = [], None, 0
    for token, _, from_draft in speculative_generate_step(
        mx.array(prompt), model, draft, num_draft_tokens=k, max_tokens=tokens
    ):
        ids.append(int(token))
        drafted += bool(from_draft)
        if first is None:
            first = time.perf_counter()
    return (len(ids) - 1) / (time.perf_counter() - first), ids, drafted


def plain_ids(llm, prompt, tokens: int):
    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True, speculative="off")
    return list(llm.generate([prompt], params)[0].token_ids)


def compare_pair(llm, mlx_pair, name, prompt, tokens, rounds, k):
    """One pair and prompt: omlx and mlx-lm in alternating rounds; prints and returns the ratio."""
    want = plain_ids(llm, prompt, tokens)
    omlx_run(llm, prompt, 8, k)  # warm-up (the prompt's KV into the block cache)
    mlx_lm_run(*mlx_pair, prompt, 8, k)
    theirs_drafted = 0
    order = ["omlx", "omlx always", "mlx-lm"]
    speeds = {who: [] for who in order}
    ids, spec = {}, {who: dict.fromkeys(("drafted", "accepted", "passes", "emitted"), 0) for who in order}
    for i in range(rounds):
        for who in order if i % 2 == 0 else order[::-1]:
            before = llm.engine.stats().speculative
            if who == "mlx-lm":
                speed, ids[who], drafted = mlx_lm_run(*mlx_pair, prompt, tokens, k)
                theirs_drafted += drafted
            else:
                speed, ids[who] = omlx_run(llm, prompt, tokens, k, always=who == "omlx always")
            after = llm.engine.stats().speculative
            for key, name_ in (("drafted", "drafted_tokens"), ("accepted", "accepted_tokens")):
                spec[who][key] += after[name_] - before[name_]
            spec[who]["passes"] += after["verify_passes"] - before["verify_passes"]
            spec[who]["emitted"] += after["emitted_tokens"] - before["emitted_tokens"]
            speeds[who].append(speed)
    median = {who: statistics.median(speeds[who]) for who in order}
    theirs = median["mlx-lm"]
    print(
        f"{name}: mlx-lm {theirs:.2f} tok/s, tokens from its drafts {theirs_drafted}/{rounds * tokens}, "
        f"greedy {ids['mlx-lm'] == want}",
        flush=True,
    )
    for who in order[:2]:
        s = spec[who]
        rate = s["accepted"] / s["drafted"] if s["drafted"] else 0
        print(
            f"  {who:12s} {median[who]:6.2f} tok/s   ratio to mlx-lm {median[who] / theirs:5.2f}x   "
            f"acceptance {s['accepted']}/{s['drafted']} ({rate:.0%})   "
            f"tokens from verify passes {s['emitted']}/{rounds * tokens}   "
            f"tokens/pass {s['emitted'] / s['passes'] if s['passes'] else 0:.2f}   greedy {ids[who] == want}",
            flush=True,
        )
    return median["omlx"] / theirs


def main(folder: Path, makers: dict, args) -> None:
    """``makers``: workload name -> a function of the tokenizer that makes its prompt."""
    from mlx_lm import load as mlx_lm_load

    draft_folder = truncated_copy(folder, args.layers, Path(args.draft_dir))
    target = mlx_lm_load(str(folder))[0]
    print(f"draft model pairs, k={args.k}, {args.tokens} tokens, {args.rounds} rounds, median", flush=True)
    with LLM(folder, max_concurrent_requests=4) as llm:
        prompts = {name: make(llm.tokenizer) for name, make in makers.items()}
        for label, path in (("self draft", folder), (f"{args.layers}-layer draft", draft_folder)):
            llm.engine.attach_draft(label, load_model(path))
            draft = target if path == folder else mlx_lm_load(str(path))[0]
            for workload, prompt in prompts.items():
                compare_pair(
                    llm, (target, draft), f"{label}, {workload}", prompt, args.tokens, args.rounds, args.k
                )
