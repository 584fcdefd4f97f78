"""Embeddings per second: `omlx serve` at batch 1 (one request after the other) and with 32
concurrent requests (the engine coalesces them into shared forward passes: the batching gain),
next to sentence-transformers called directly on the same folder (PyTorch on this machine's
CPU, batch 1 and batch 32), all in one run on the same random-weight model.

Every request carries one text of about ``--words`` words (distinct texts, so nothing is
cached). The server runs in a subprocess; its clients are keep-alive httpx connections, one per
thread. sentence-transformers runs in this process while the server is idle. The four runs are
interleaved over ``--rounds`` rounds (each on its own share of the texts) and each figure is the
median of its rounds, so that load from other processes on a shared machine hits all of them.

    .venv/bin/python benchmarks/bench_embeddings.py [--arch bert_embedding|qwen3_embedding]
        [--preset small] [--requests 256] [--rounds 4] [--concurrency 32] [--words 40]

mlx-embeddings is not compared: it pulls in mlx-vlm, mlx-audio, opencv and datasets, and omlx
serves encoders with its own MLX module (inference/embedding/bert.py) instead.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_servers import free_port, wait_until_up  # noqa: E402


def texts(count: int, words: int, seed: int = 0):
    from inference.model_factory import _WORDS

    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(words)) + f" {i}." for i in range(count)]


def serve_rate(url: str, model: str, items, concurrency: int) -> float:
    """Embeddings per second over ``items``, one text per request, ``concurrency`` at a time."""
    import httpx

    local = threading.local()

    def one(text):
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(timeout=300)
        reply = client.post(url + "/v1/embeddings", json={"model": model, "input": text,
                                                          "encoding_format": "base64"})
        reply.raise_for_status()

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, items))
    return len(items) / (time.perf_counter() - started)


def sentence_transformers_rate(model, items, batch_size: int) -> float:
    started = time.perf_counter()
    model.encode(items, batch_size=batch_size)
    return len(items) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="bert_embedding", choices=("bert_embedding", "qwen3_embedding"))
    parser.add_argument("--preset", default="small")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--words", type=int, default=40)
    args = parser.parse_args()
    from inference.model_factory import build_model

    items = texts(args.requests, args.words)
    with tempfile.TemporaryDirectory(prefix="omlx-bench-embed-") as tmp:
        work = Path(tmp)
        path = build_model(work / "models" / "embed", arch=args.arch, preset=args.preset)
        env = dict(os.environ, OMLX_HOME=str(work / "home"), PYTHONPATH=str(REPO), OMLX_HF_CACHE="off")
        env.pop("OMLX_API_KEY", None)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "omlx_site.cli", "serve", "--port", str(port),
                                   "--model-dir", str(work / "models")], env=env, cwd=REPO,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_up(url, server)
            from sentence_transformers import SentenceTransformer

            reference = SentenceTransformer(str(path), device="cpu")
            reference.encode(items[:args.concurrency], batch_size=args.concurrency)  # warm
            serve_rate(url, "embed", items[:2], 1)  # warm: the model loads on the first request
            runs = {
                "omlx serve, batch 1 (sequential requests)": lambda part: serve_rate(url, "embed", part, 1),
                f"omlx serve, {args.concurrency} concurrent requests":
                    lambda part: serve_rate(url, "embed", part, args.concurrency),
                "sentence-transformers (torch CPU), batch 1": lambda part: sentence_transformers_rate(
                    reference, part, 1),
                f"sentence-transformers (torch CPU), batch {args.concurrency}":
                    lambda part: sentence_transformers_rate(reference, part, args.concurrency),
            }
            share = len(items) // args.rounds
            measured = {name: [] for name in runs}
            for r in range(args.rounds):
                for name, run in runs.items():
                    measured[name].append(run(items[r * share:(r + 1) * share]))
        finally:
            server.terminate()
            server.wait(60)
    rates = {name: statistics.median(values) for name, values in measured.items()}
    base = next(iter(rates.values()))
    print(f"{args.arch} {args.preset}, {args.requests} texts of ~{args.words} words, median of "
          f"{args.rounds} interleaved rounds")
    print("| run | embeddings/s | vs omlx batch 1 |\n|---|---:|---:|")
    for name, rate in rates.items():
        spread = "/".join(f"{v:.1f}" for v in measured[name])
        print(f"| {name} | {rate:.1f} ({spread}) | {rate / base:.2f}x |")
    names = list(rates)
    print(f"batching gain (omlx {args.concurrency} concurrent / batch 1): {rates[names[1]] / rates[names[0]]:.2f}x")
    print(f"omlx {args.concurrency} concurrent / sentence-transformers batch {args.concurrency}: "
          f"{rates[names[1]] / rates[names[3]]:.2f}x")
    print(f"omlx batch 1 / sentence-transformers batch 1: {rates[names[0]] / rates[names[2]]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
