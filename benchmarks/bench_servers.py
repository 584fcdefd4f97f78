"""`omlx bench` against `omlx serve` and against mlx-lm's own server, side by side in one run.

Both servers serve the same model folder on this machine (random weights, float32; mlx-lm's
server is started with the same OpenBLAS preloaded, so that BLAS is not the difference). The
same benchmark (inference.bench over the OpenAI URL target: streamed /v1/completions) runs
against each, alternating which goes first, ``--rounds`` times (5 by default); each figure is
the median of the per-round ratios omlx / mlx-lm (for TTFT: mlx-lm / omlx, so above 1 always
means omlx is faster), printed with every round's ratio and with the two values of the round that
has the median ratio, so the table never contradicts itself (benchmarks/rounds.py). Each server's
own median over rounds is printed in a table of its own, without a ratio.

mlx-lm's server has no ``ignore_eos``: the request carries it and mlx-lm ignores it, so a stream
may stop before ``--gen-tokens``. Decode tokens/s counts the tokens each server did generate
(usage.completion_tokens); the completion tokens of each side are printed next to the ratios.

    .venv/bin/python benchmarks/bench_servers.py [--preset small|default]
        [--model-preset tiny|small] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import inference  # noqa: E402,F401  (fast BLAS before mlx)

from inference.bench import PRESETS, OpenAITarget, run_benchmark  # noqa: E402
from benchmarks.rounds import compare, medians_table, ratio_table, run_rounds  # noqa: E402

MLX_LM_SERVER = (
    "import sys; import inference.platform as p; p.preload_fast_blas(); import runpy; "
    "sys.argv[0] = 'mlx_lm.server'; runpy.run_module('mlx_lm.server', run_name='__main__')"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, process, timeout=180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server at {url} exited with {process.returncode}")
        try:
            httpx.get(url + "/v1/models", timeout=2.0)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError(f"nothing answers at {url}")


def server_env(work: Path, **extra) -> dict:
    """A benchmarked server's environment: this one with OMLX_HOME ``work``/home, the repository
    importable first (before this environment's PYTHONPATH, where a bare machine may keep the
    packages: scripts/cuda_check.sh), ``extra`` set, and no API key."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMLX_HOME=str(work / "home"), PYTHONPATH=path, **extra)
    env.pop("OMLX_API_KEY", None)
    return env


def omlx_serve_argv(port: int, models: Path, *flags) -> list:
    """`omlx serve` of the folders in ``models`` on ``port``, with more ``flags``."""
    return [
        sys.executable,
        "-m",
        "omlx_site.cli",
        "serve",
        "--port",
        str(port),
        "--model-dir",
        str(models),
        *flags,
    ]


def mlx_lm_argv(port: int, folder: Path) -> list:
    """mlx-lm's own server (mlx_lm.server, the fast BLAS preloaded) on ``folder`` and ``port``."""
    argv = [sys.executable, "-c", MLX_LM_SERVER, "--model", str(folder), "--port", str(port)]
    return argv + ["--log-level", "WARNING"]


@contextmanager
def running(argv_for, env=None, cwd=None):
    """The server ``argv_for(port)`` starts on a free port (output dropped), up and answering:
    yields (process, URL); stopped on leaving."""
    port = free_port()
    process = subprocess.Popen(
        argv_for(port), env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(url, process)
        yield process, url
    finally:
        process.terminate()
        process.wait(60)


def omlx_server(models: Path, work: Path, *flags, **env):
    """`omlx serve` of ``models`` (``flags``: more arguments; ``env``: more environment, see
    ``server_env``) as ``running`` starts it: yields (process, URL)."""
    return running(lambda port: omlx_serve_argv(port, models, *flags), server_env(work, **env), REPO)


def start_servers(folder: Path, work: Path, names=("omlx", "mlx-lm"), omlx_args=()):
    """The servers ``names`` (omlx, mlx-lm) on ``folder``: name -> (process, URL, model name).
    ``omlx_args``: more `omlx serve` arguments."""
    env = server_env(work)
    models = work / "models"
    models.mkdir()
    os.symlink(folder, models / "model")
    commands = {
        "omlx": lambda port: omlx_serve_argv(port, models, *omlx_args),
        "mlx-lm": lambda port: mlx_lm_argv(port, folder),
    }
    model_names = {"omlx": "model", "mlx-lm": "default_model"}
    servers = {}
    try:
        for name in names:
            port = free_port()
            process = subprocess.Popen(
                commands[name](port), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            servers[name] = (process, f"http://127.0.0.1:{port}", model_names[name])
        for process, url, _ in servers.values():
            wait_until_up(url, process)
    except BaseException:
        stop_servers(servers)  # one that failed to come up leaves no other running
        raise
    return servers


def figures(results: dict) -> dict:
    """The compared figures of one run: name -> (value, higher is better)."""
    out = {}
    for row in results["prefill"]:
        c = row["concurrency"]
        out[f"prefill tokens/s aggregate, c={c}"] = (row["tokens_per_s"]["aggregate"], True)
        out[f"prefill TTFT p50, c={c}"] = (row["ttft_s"]["p50"], False)
    for row in results["decode"]:
        c = row["concurrency"]
        out[f"decode tokens/s per stream, c={c}"] = (row["tokens_per_s"]["per_stream"], True)
        out[f"decode tokens/s aggregate, c={c}"] = (row["tokens_per_s"]["aggregate"], True)
    cache = results["cache"]
    out["TTFT cold p50"] = (cache["cold"]["p50"], False)
    out["TTFT cached p50"] = (cache["cached"]["p50"], False)
    return out


def comparisons(runs: dict) -> list:
    """One Comparison per figure, omlx against mlx-lm; above 1 always means omlx is faster (for
    a time the ratio is mlx-lm's / omlx's)."""
    return [
        compare(name, runs["omlx"], runs["mlx-lm"], lambda run, n=name: figures(run)[n][0], invert=not higher)
        for name, (_, higher) in figures(runs["omlx"][0]).items()
    ]


def show(c, value) -> str:
    return f"{value * 1000:.1f} ms" if "TTFT" in c.name else f"{value:.0f}"


def stop_servers(servers: dict) -> None:
    for process, _, _ in servers.values():
        process.terminate()
    for process, _, _ in servers.values():
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default", help="the benchmark's sizes")
    parser.add_argument("--model-preset", default="small", help="testkit preset of the model (tiny, small)")
    parser.add_argument("--model", help="a model folder instead of a built one")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="alternating rounds (default 5; odd keeps the median a real round's ratio)",
    )
    parser.add_argument("--json", help="also write every run's results here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    settings = PRESETS[args.preset]
    with tempfile.TemporaryDirectory(prefix="omlx-bench-servers-") as tmp:
        work = Path(tmp)
        if args.model:
            folder = Path(args.model).resolve()
        else:
            from inference.testkit.registry import build_model

            folder = build_model(work / "built", preset=args.model_preset)
        servers = start_servers(folder, work)

        def run_one(name):
            _, url, model = servers[name]
            with OpenAITarget(url + "/v1", model) as target:
                return run_benchmark(target, settings)

        try:
            runs = run_rounds(list(servers), args.rounds, run_one)
        finally:
            stop_servers(servers)
    table = comparisons(runs)
    print(
        f"omlx bench --preset {args.preset}, model {args.model or args.model_preset} (float32, OpenBLAS), "
        f"{args.rounds} rounds, the order alternating. omlx advantage: the median of the per-round ratios "
        f"omlx / mlx-lm (for TTFT mlx-lm / omlx), above 1 when omlx is faster; the two values next to it "
        f"are those of the round with that median ratio.\n"
    )
    print(ratio_table(table, "omlx", "mlx-lm server", "omlx advantage", show))
    print("\nEach server's own median over rounds (context; a ratio of these is not the figure):\n")
    print(medians_table(table, "omlx", "mlx-lm server", show))
    for name in servers:
        last = runs[name][-1]
        print(
            f"{name}: decode completion tokens {[r['completion_tokens'] for r in last['decode']]}, "
            f"cached tokens of the repeated prompt {last['cache']['cached_tokens']}, errors {last['errors']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
