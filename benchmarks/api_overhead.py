"""Where the time of one API request goes on a model with negligible compute (a breakdown helper).

Starts `omlx serve` on a testkit model (inference.testkit) (tiny by default) and times, over one keep-alive
HTTP connection, one request after the other (no concurrency):

- ``GET /v1/models``: HTTP server + middleware + a ninja view, no generation (the floor);
- a streamed ``/v1/completions`` of a repeated (cached) prompt with ``max_tokens`` 1: the time to
  the first token (TTFT) of a cached prefix, the figure coding agents feel;
- a streamed completion of a new prompt each time (about 500 tokens, uncached; the prefill);
- the cached one, not streamed: the whole response;
- a streamed completion of ``--decode-tokens`` tokens: the time per token after the first.

``--handoff direct`` serves with ``OMLX_API_HANDOFF=direct`` (no Huey queue), as a reference.

    .venv/bin/python benchmarks/api_overhead.py [--model-preset tiny] [--requests 40] [--handoff huey|direct]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_servers import omlx_server  # noqa: E402


def _stream(client, url: str, body: dict):
    """(seconds to the first token, seconds from the first to the last token, tokens)."""
    start = time.perf_counter()
    first = last = None
    tokens = 0
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            chunk = json.loads(line[5:])
            if any(c.get("text") for c in chunk.get("choices") or []):
                now = time.perf_counter()
                first = first or now
                last = now
                tokens += 1
    return first - start, last - first, tokens


def measure(url: str, model: str, requests: int, decode_tokens: int) -> dict:
    import httpx

    prompt = " ".join(f"word{i % 50}" for i in range(400))
    base = {"model": model, "prompt": prompt, "temperature": 0.0, "ignore_eos": True}
    out = {}
    with httpx.Client(timeout=120.0) as client:
        for _ in range(3):  # warm-up: the model loads, the prompt gets cached
            _stream(client, url + "/v1/completions", dict(base, max_tokens=2, stream=True))
        times = []
        for _ in range(requests):
            start = time.perf_counter()
            client.get(url + "/v1/models").raise_for_status()
            times.append(time.perf_counter() - start)
        out["GET /v1/models"] = times
        out["cached TTFT, streamed"] = [
            _stream(client, url + "/v1/completions", dict(base, max_tokens=1, stream=True))[0]
            for _ in range(requests)
        ]
        out["uncached TTFT, streamed"] = [
            _stream(
                client,
                url + "/v1/completions",
                dict(base, prompt=f"request {i} {time.time()} " + prompt[:1200], max_tokens=1, stream=True),
            )[0]
            for i in range(requests)
        ]
        times = []
        for _ in range(requests):
            start = time.perf_counter()
            client.post(url + "/v1/completions", json=dict(base, max_tokens=1)).raise_for_status()
            times.append(time.perf_counter() - start)
        out["cached, not streamed, whole"] = times
        per_token = []
        for _ in range(max(3, requests // 8)):
            _, span, tokens = _stream(
                client, url + "/v1/completions", dict(base, max_tokens=decode_tokens, stream=True)
            )
            per_token.append(span / max(tokens - 1, 1))
        out["decode, per token"] = per_token
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-preset", default="tiny")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--handoff", choices=("huey", "direct"), default="huey")
    parser.add_argument("--url", help="time a server already running here (model 'model') instead")
    args = parser.parse_args()
    if args.url:
        results = measure(args.url.rstrip("/"), "model", args.requests, args.decode_tokens)
    else:
        from inference.testkit.registry import build_model

        with tempfile.TemporaryDirectory(prefix="omlx-api-overhead-") as tmp:
            work = Path(tmp)
            models = work / "models"
            models.mkdir()
            build_model(models / "model", preset=args.model_preset)
            with omlx_server(models, work, OMLX_API_HANDOFF=args.handoff) as (_, url):
                results = measure(url, "model", args.requests, args.decode_tokens)
    print(f"model {args.model_preset}, handoff {args.handoff}, {args.requests} requests each (ms)")
    print("| figure | p50 | p90 |\n|---|---:|---:|")
    for name, values in results.items():
        values = sorted(values)
        print(
            f"| {name} | {statistics.median(values) * 1000:.2f} | "
            f"{values[int(len(values) * 0.9)] * 1000:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
