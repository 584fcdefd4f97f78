"""Prefix-aware routing across workers (issue 29): the agentic load (`omlx bench --scenario
agentic`'s scenario) against `omlx serve --redis-url` with three `omlx worker`s, once per routing
policy (OMLX_ROUTE_POLICY), each run on a fresh redis-server and fresh workers (empty caches).
Prints, per policy, the prompt tokens sent, those the workers reused from their caches
(cached_tokens), the reuse share, and the ratio of each policy's reuse to prefix routing's.

Each worker has its own home, so its own cold tier (as on separate machines without a shared
folder): with ``--shared-cold`` the three point --paged-ssd-cache-dir at one folder instead, so
that a block one worker wrote is restored by another.

    .venv/bin/python benchmarks/bench_routing.py [--policies prefix,random,least-loaded]
        [--workers 3] [--model-preset tiny] [--shared-cold] [--decode-weight W]
        [--conversations N --turns T --system-tokens S --burst B ...] [--json out.json]
        [--keep-server-log DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from benchmarks.bench_agentic import SIZE_FLAGS  # noqa: E402
from inference.bench import AGENTIC_PRESETS, OpenAITarget, run_agentic  # noqa: E402

SECRET = "bench-routing-secret-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, env, log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=REPO)


def wait_for(check, what: str, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up")


def run_policy(policy: str, folder: Path, work: Path, args, settings) -> dict:
    import httpx

    work.mkdir()
    port = free_port()
    procs = [
        start(
            [shutil.which("redis-server"), "--port", str(port), "--save", "", "--appendonly", "no"],
            dict(os.environ),
            work / "redis.log",
        )
    ]
    url = f"redis://127.0.0.1:{port}/0"
    env = dict(
        os.environ,
        OMLX_REDIS_URL=url,
        OMLX_REDIS_SECRET=SECRET,
        OMLX_MODEL_DIR=str(folder.parent),
        OMLX_ROUTE_POLICY=policy,
        OMLX_LOG_LEVEL="WARNING",
        PYTHONPATH=str(REPO),
    )
    for name in ("OMLX_API_KEY", "OMLX_HUEY_WORKERS", "OMLX_API_HANDOFF"):
        env.pop(name, None)
    if args.decode_weight is not None:
        env["OMLX_ROUTE_DECODE_WEIGHT"] = str(args.decode_weight)
    try:
        wait_for(lambda: "Ready to accept" in (work / "redis.log").read_text(), "redis-server")
        for i in range(args.workers):
            home = work / f"worker-{i}"
            home.mkdir()
            wenv = dict(env, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
            argv = [sys.executable, "-m", "omlx_site.cli", "worker"]
            if args.shared_cold:
                argv += ["--paged-ssd-cache-dir", str(work / "shared-cold")]
            procs.append(start(argv, wenv, work / f"worker-{i}.log"))
        home = work / "server"
        home.mkdir()
        senv = dict(env, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
        if args.keep_server_log:
            senv["OMLX_LOG_LEVEL"] = "DEBUG"  # every routing decision, with its figures
        procs.append(
            start([sys.executable, "-m", "omlx_site.cli", "serve", "--port", "0"], senv, work / "server.log")
        )

        def served():
            if procs[-1].poll() is not None:
                raise RuntimeError("omlx serve exited:\n" + (work / "server.log").read_text()[-3000:])
            m = re.search(r"^omlx serving .*?(http://\S+)\s*$", (work / "server.log").read_text(), re.M)
            return m.group(1) if m else None

        base = wait_for(served, "omlx serve")

        def workers_up():
            text = httpx.get(base + "/metrics", timeout=30).text
            return text.count("omlx_worker_up{") >= args.workers

        wait_for(workers_up, f"{args.workers} workers")
        target = OpenAITarget(base + "/v1", folder.name, endpoint="chat")
        results = run_agentic(target, settings)
        metrics = httpx.get(base + "/metrics", timeout=30).text
        results["routing"] = {
            "policy": policy,
            "decisions": re.findall(r"^omlx_route_decisions_total\{(.*)\} (\S+)$", metrics, re.M),
            "workers": worker_figures(url),
        }
        return results
    finally:
        if args.keep_server_log:
            shutil.copy(work / "server.log", Path(args.keep_server_log) / f"{policy}-server.log")
            for i in range(args.workers):
                log = work / f"worker-{i}.log"
                if log.exists():
                    shutil.copy(log, Path(args.keep_server_log) / f"{policy}-worker-{i}.log")
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()


def worker_figures(url: str) -> dict:
    """Per worker, from the summaries it publishes: prompt tokens it looked up in its cache and
    those served from RAM and from SSD."""
    import redis

    from inference.dispatch import worker_summary

    summaries, _ = worker_summary.read_all(redis.Redis.from_url(url), SECRET)
    return {
        w: {
            "lookup": s.lookup_tokens,
            "hot": s.hot_hit_tokens,
            "cold": s.cold_hit_tokens,
            "tier": s.cold_tier,
        }
        for w, s in sorted(summaries.items())
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default="prefix,random", help="comma-separated routing policies")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--model-preset", default="tiny", help="testkit preset of the model (tiny, small, ...)"
    )
    parser.add_argument("--shared-cold", action="store_true", help="the workers share one cold-tier folder")
    parser.add_argument(
        "--decode-weight",
        type=float,
        help="OMLX_ROUTE_DECODE_WEIGHT (default 1; a worker's measurement replaces it)",
    )
    for name in SIZE_FLAGS:
        parser.add_argument("--" + name.replace("_", "-"), type=int, help=f"override the scenario's {name}")
    parser.add_argument("--json", help="also write every run's results here")
    parser.add_argument(
        "--keep-server-log",
        metavar="DIR",
        help="copy each policy's server log (DEBUG: every routing decision) and worker logs here",
    )
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        parser.error("redis-server is not installed (scripts/install_system_deps.sh)")
    settings = replace(
        AGENTIC_PRESETS["default"],
        **{n: getattr(args, n) for n in SIZE_FLAGS if getattr(args, n) is not None},
    )
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    runs = {}
    with tempfile.TemporaryDirectory(prefix="omlx-bench-routing-") as tmp:
        work = Path(tmp)
        from inference.testkit.registry import build_model

        folder = build_model(work / "models" / "agent", preset=args.model_preset)
        for policy in policies:
            runs[policy] = run_policy(policy, folder, work / policy, args, settings)
    print(
        f"\n{args.workers} workers, {settings.conversations} conversations x {settings.turns} turns, "
        f"{settings.arrival()}; {'one shared' if args.shared_cold else 'a cold tier per worker'}"
    )
    base = None
    print(f"{'policy':<14} {'prompt tokens':>14} {'reused':>10} {'reuse':>8} {'vs ' + policies[0]:>12}")
    for policy, results in runs.items():
        s = results["summary"]
        share = (s["cached_tokens"] or 0) / s["prompt_tokens"] if s["prompt_tokens"] else 0.0
        base = share if base is None else base
        ratio = share / base if base else float("nan")
        reused = s["cached_tokens"] or 0
        print(f"{policy:<14} {s['prompt_tokens']:>14,} {reused:>10,} {share:>8.1%} {ratio:>12.2f}")
        print(
            "    routing decisions: "
            + ", ".join(f"{{{labels}}} {v}" for labels, v in results["routing"]["decisions"])
        )
        per_worker = {}
        for labels, value in results["routing"]["decisions"]:
            worker = re.search(r'worker="([^"]*)"', labels).group(1)
            per_worker[worker] = per_worker.get(worker, 0) + int(float(value))
        print(
            "    requests per worker: "
            + " / ".join(str(n) for n in sorted(per_worker.values(), reverse=True))
        )
        for worker, f in results["routing"]["workers"].items():
            print(
                f"    worker {worker}: {per_worker.get(worker, 0)} requests, looked up {f['lookup']:,} "
                f"tokens, hits {f['hot']:,} from RAM + {f['cold']:,} from SSD "
                f"(SSD tier {f['tier'] or 'unnamed'})"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
