"""Embeddings per second through `omlx serve`: requests one after the other (batch 1) and
``--concurrency`` at once (the engine coalesces them into shared forward passes: the batching
gain), next to sentence-transformers called directly on the same folder (PyTorch on this
machine's CPU, batch 1 and batch ``--concurrency``), all in one run on the same random-weight
model.

Every request carries one text of about ``--words`` words (distinct texts, so nothing is
cached). The server runs in a subprocess. Its clients are ``--concurrency`` keep-alive httpx
connections made and warmed before any timing (making an httpx client costs 30-50 ms of CPU;
made inside the timed run, 32 of them would be charged to the concurrent side only). The four
runs go in rotating order over ``--rounds`` rounds, each on its own share of the texts; every
ratio is the median of the per-round ratios (benchmarks/rounds.py), so load from other
processes on a shared machine hits both sides of each ratio alike.

Besides wall-clock rates it reports CPU time per embedding (the server process's, read from
/proc, plus this client process's; sentence-transformers: this process's), which moves much
less with other processes' load than wall time does, and the batch size requests actually got
(the server's ``omlx_embedding_sequences_total`` / ``omlx_embedding_forward_passes_total``).

    .venv/bin/python benchmarks/bench_embeddings.py [--arch bert_embedding|qwen3_embedding]
        [--preset small] [--requests 320] [--rounds 5] [--concurrency 32] [--words 40]
        [--batch-wait-ms 0] [--st-share 0.25]

mlx-embeddings is not compared: it pulls in mlx-vlm, mlx-audio, opencv and datasets, and omlx
serves encoders with its own MLX module (inference/embedding/bert.py) instead.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_servers import omlx_server  # noqa: E402
from benchmarks.rounds import Comparison, ratio_table, run_rounds  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def texts(count: int, words: int, seed: int = 0):
    from inference.testkit.tokenizer import WORDS

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + f" {i}." for i in range(count)]


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Clients:
    """``n`` keep-alive HTTP clients, each connected and warmed; ``run`` sends texts through the
    first ``k`` of them, each on its own thread, ``k`` requests in flight at any time."""

    def __init__(self, url: str, model: str, n: int):
        import httpx

        self.url, self.model = url, model
        self.clients = [httpx.Client(timeout=300) for _ in range(n)]
        for client in self.clients:
            client.get(url + "/health").raise_for_status()

    def run(self, items, k: int) -> float:
        """Seconds to get embeddings of ``items``, one text per request, ``k`` at a time."""
        todo: "queue.SimpleQueue[str]" = queue.SimpleQueue()
        for item in items:
            todo.put(item)
        errors: List[BaseException] = []
        start = threading.Barrier(k + 1)

        def worker(client):
            start.wait()
            try:
                while True:
                    try:
                        text = todo.get_nowait()
                    except queue.Empty:
                        return
                    client.post(
                        self.url + "/v1/embeddings",
                        json={"model": self.model, "input": text, "encoding_format": "base64"},
                    ).raise_for_status()
            except BaseException as exc:  # reported after the run
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(c,)) for c in self.clients[:k]]
        for t in threads:
            t.start()
        start.wait()
        began = time.perf_counter()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return time.perf_counter() - began

    def batches(self) -> Tuple[float, float]:
        """(forward passes, sequences) the server counted for the model so far."""
        counts = {}
        for line in self.clients[0].get(self.url + "/metrics").text.splitlines():
            for series in ("forward_passes", "sequences"):
                if line.startswith(f'omlx_embedding_{series}_total{{model="{self.model}"}}'):
                    counts[series] = float(line.split()[-1])
        return counts.get("forward_passes", 0.0), counts.get("sequences", 0.0)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", default="bert_embedding", choices=("bert_embedding", "qwen3_embedding"))
    parser.add_argument("--preset", default="small")
    parser.add_argument("--requests", type=int, default=320, help="texts in all, shared out over the rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--words", type=int, default=40)
    parser.add_argument("--batch-wait-ms", type=float, default=0.0, help="the server's --max-batch-wait-ms")
    parser.add_argument(
        "--st-share",
        type=float,
        default=0.25,
        help="share of a round's texts sentence-transformers runs at batch 1 (it is slow)",
    )
    args = parser.parse_args()
    from inference.testkit.registry import build_model

    k = args.concurrency
    items = texts(args.requests, args.words)
    share = len(items) // args.rounds
    sides = ["omlx 1", "omlx k", "st 1", "st k"]
    labels = {
        "omlx 1": "omlx serve, batch 1 (sequential requests)",
        "omlx k": f"omlx serve, {k} concurrent requests",
        "st 1": "sentence-transformers (torch CPU), batch 1",
        "st k": f"sentence-transformers (torch CPU), batch {k}",
    }
    with tempfile.TemporaryDirectory(prefix="omlx-bench-embed-") as tmp:
        work = Path(tmp)
        path = build_model(work / "models" / "embed", arch=args.arch, preset=args.preset)
        flags = ("--max-batch-wait-ms", str(args.batch_wait_ms))
        with omlx_server(work / "models", work, *flags, OMLX_HF_CACHE="off") as (server, url):
            clients = None
            try:
                from sentence_transformers import SentenceTransformer

                reference = SentenceTransformer(str(path), device="cpu")
                reference.encode(items[:k], batch_size=k)  # warm
                clients = Clients(url, "embed", k)
                clients.run(items[:2], 1)  # warm: the model loads on the first request
                clients.run(items[:k], k)
                rounds_done = {side: 0 for side in sides}

                def run_one(side):
                    r = rounds_done[side]
                    rounds_done[side] += 1
                    part = items[r * share : (r + 1) * share]
                    if side == "st 1":
                        part = part[: max(1, int(len(part) * args.st_share))]
                    passes0, seqs0 = clients.batches()
                    cpu0, server0 = own_cpu(), process_cpu(server.pid)
                    began = time.perf_counter()
                    if side.startswith("omlx"):
                        clients.run(part, 1 if side == "omlx 1" else k)
                    else:
                        reference.encode(part, batch_size=1 if side == "st 1" else k)
                    seconds = time.perf_counter() - began
                    client_cpu = own_cpu() - cpu0
                    server_cpu = process_cpu(server.pid) - server0 if side.startswith("omlx") else 0.0
                    passes, seqs = (a - b for a, b in zip(clients.batches(), (passes0, seqs0)))
                    return {
                        "rate": len(part) / seconds,
                        "cpu_ms": 1000 * (client_cpu + server_cpu) / len(part),
                        "server_ms": 1000 * server_cpu / len(part),
                        "client_ms": 1000 * client_cpu / len(part),
                        "batch": seqs / passes if passes else None,
                        "load": os.getloadavg()[0],
                    }

                runs = run_rounds(sides, args.rounds, run_one)
            finally:
                if clients is not None:
                    clients.close()

    def values(side, key):
        return [run[key] for run in runs[side]]

    print(
        f"{args.arch} {args.preset}, {share} texts of ~{args.words} words a round "
        f"(sentence-transformers batch 1: {max(1, int(share * args.st_share))}), {args.rounds} rounds in "
        f"rotating order, server --max-batch-wait-ms {args.batch_wait_ms:g}; load average during the "
        f"rounds {min(values('omlx k', 'load')):.1f}-{max(values('omlx k', 'load')):.1f}\n"
    )
    print(
        "| run | embeddings/s, median (rounds) | CPU ms per embedding: all (server + client), median "
        "| mean batch |\n|---|---:|---:|---:|"
    )
    for side in sides:
        rates = values(side, "rate")
        batch = [b for b in values(side, "batch") if b] if side.startswith("omlx") else []
        cpu = f"{statistics.median(values(side, 'cpu_ms')):.1f}"
        if side.startswith("omlx"):
            cpu += (
                f" ({statistics.median(values(side, 'server_ms')):.1f} + "
                f"{statistics.median(values(side, 'client_ms')):.1f})"
            )
        print(
            f"| {labels[side]} | {statistics.median(rates):.1f} ({'/'.join(f'{v:.1f}' for v in rates)}) | "
            f"{cpu} | " + (f"{statistics.mean(batch):.1f} |" if batch else "- |")
        )

    def comparison(name, ours, theirs, key="rate", invert=False):
        c = Comparison(name, invert=invert)
        for a, b in zip(runs[ours], runs[theirs]):
            c.add(a[key], b[key])
        return c

    print()
    print(
        ratio_table(
            [
                comparison(f"batching gain: embeddings/s, {k} concurrent / sequential", "omlx k", "omlx 1"),
                comparison(
                    f"batching gain: CPU per embedding, sequential / {k} concurrent",
                    "omlx k",
                    "omlx 1",
                    key="cpu_ms",
                    invert=True,
                ),
                comparison(
                    f"embeddings/s, omlx {k} concurrent / sentence-transformers batch {k}", "omlx k", "st k"
                ),
                comparison("embeddings/s, omlx sequential / sentence-transformers batch 1", "omlx 1", "st 1"),
            ],
            "ours",
            "theirs",
            "median ratio",
            show=lambda c, v: f"{v:.1f}",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
