"""Greedy generation with a model split across the ranks of a distributed group.

    mlx.launch -n 2 --backend ring -- -m inference.distributed.generate MODEL \\
        --prompt 1,2,3 --prompt 4,5 --max-tokens 8 --out DIR [--parallel tensor]

Every rank runs this same program (SPMD); each writes ``DIR/rank<r>.json``: what it holds (its
layer range, or with ``--parallel tensor`` every layer and its share of the KV heads), the
tokens generated for each prompt, one prompt at a time (prefill in chunks, then decode), and
for all prompts as one left-padded batch. Without a launcher the group has one rank and the
model is not split: the reference the split runs must equal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, make_prompt_cache

from inference.engine.model_loader import ModelLoadError, load_model

from .tensor import MODES, TensorShard, sharder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference.distributed.generate", description=__doc__)
    parser.add_argument("model", help="a model folder (MLX or Hugging Face format)")
    parser.add_argument("--prompt", action="append", required=True, help="token ids, comma separated")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=4, help="prefill chunk size (tokens)")
    parser.add_argument("--out", required=True, help="the folder each rank writes rank<r>.json to")
    parser.add_argument("--parallel", choices=MODES, default="pipeline", help="how the model is cut")
    args = parser.parse_args(argv)
    try:
        prompts = [[int(t) for t in p.split(",")] for p in args.prompt]
    except ValueError:
        parser.error("--prompt takes token ids separated by commas")
    group = mx.distributed.init()
    parts = []
    shard = sharder(args.parallel, group, parts) if group.size() > 1 else None
    try:
        loaded = load_model(args.model, "float32", shard=shard)
    except ModelLoadError as exc:
        print(f"rank {group.rank()}: {exc}", file=sys.stderr)
        return 2
    model = loaded.model
    part = parts[0] if parts else None
    layers = (
        [0, len(model.layers)] if part is None or isinstance(part, TensorShard) else [part.start, part.end]
    )
    result = {
        "rank": group.rank(),
        "size": group.size(),
        "parallel": args.parallel if part is not None else None,
        "layers": layers,
        "kv_bytes_per_token": loaded.kv_bytes_per_token,
        "sequential": [greedy(model, p, args.max_tokens, args.chunk) for p in prompts],
        "batched": greedy_batch(model, prompts, args.max_tokens),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{group.rank()}.json").write_text(json.dumps(result))
    return 0


def greedy(model, prompt: List[int], max_tokens: int, chunk: int = 4) -> List[int]:
    """The ``max_tokens`` greedy tokens after ``prompt``, prefilled ``chunk`` tokens a pass."""
    cache = make_prompt_cache(model)
    for start in range(0, len(prompt) - 1, chunk):  # every prompt token but the last, in chunks
        model(mx.array([prompt[start : min(start + chunk, len(prompt) - 1)]]), cache=cache)
        mx.eval([c.state for c in cache])
    token, out = prompt[-1], []
    for _ in range(max_tokens):
        logits = model(mx.array([[token]]), cache=cache)
        token = mx.argmax(logits[0, -1]).item()
        out.append(token)
    return out


def greedy_batch(model, prompts: List[List[int]], max_tokens: int) -> List[List[int]]:
    """``greedy`` for all ``prompts`` at once, left-padded into one batch."""
    width = max(len(p) for p in prompts)
    padding = [width - len(p) for p in prompts]
    cache = [BatchKVCache(padding) for _ in model.layers]
    inputs = mx.array([[0] * pad + p for pad, p in zip(padding, prompts)])
    out = [[] for _ in prompts]
    for _ in range(max_tokens):
        logits = model(inputs, cache=cache)
        tokens = mx.argmax(logits[:, -1], axis=-1)
        for row, token in zip(out, tokens.tolist()):
            row.append(token)
        inputs = tokens[:, None]
    return out


if __name__ == "__main__":
    sys.exit(main())
