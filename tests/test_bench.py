"""The benchmark (admin_panel.bench): its core against a live `omlx serve` over the OpenAI URL
target and against an engine of this process, `omlx bench` as the real command line, and the
admin page's Huey task through a live server."""
import json
import os
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from admin_panel.bench import (PRESETS, BenchSettings, EngineTarget, OpenAITarget, TargetError,
                               parse_concurrency, run_benchmark)
from admin_panel.bench.stats import percentile, summary
from tests.conftest import ServerProcess

SMALL = BenchSettings(concurrency=(1, 2), prompt_tokens=32, gen_tokens=4, repeats=1,
                      cache_prompt_tokens=64, cached_repeats=2)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_results(results, settings, exact_tokens=True):
    """The shape and counts every run has, whoever the target."""
    assert results["version"] == 1 and results["errors"] == []
    assert results["settings"] == settings.to_dict()
    assert results["finished_at"] and results["duration_s"] > 0
    levels = list(settings.concurrency)
    assert [r["concurrency"] for r in results["prefill"]] == levels
    assert [r["concurrency"] for r in results["decode"]] == levels
    for row in results["prefill"]:
        c = row["concurrency"]
        assert row["requests"] == row["ok"] == c * settings.repeats and row["errors"] == 0
        # prompts are written from filler words measured in tokens per word: about the size asked
        assert settings.prompt_tokens / 2 <= row["prompt_tokens"] <= settings.prompt_tokens * 2
        ttft = row["ttft_s"]
        assert 0 < ttft["p50"] <= ttft["p95"] <= ttft["p99"] <= ttft["max"]
        assert row["tokens_per_s"]["per_stream"] > 0 and row["tokens_per_s"]["aggregate"] > 0
    for row in results["decode"]:
        c = row["concurrency"]
        assert row["requests"] == row["ok"] == c * settings.repeats and row["errors"] == 0
        if exact_tokens:  # ignore_eos: every stream generates exactly gen_tokens
            assert row["completion_tokens"] == c * settings.repeats * settings.gen_tokens
        assert row["tokens_per_s"]["per_stream"] > 0 and row["tokens_per_s"]["aggregate"] > 0
    cache = results["cache"]
    assert len(cache["cold_ttft_s"]) == 1 and len(cache["cached_ttft_s"]) == settings.cached_repeats
    assert cache["requests"] == 1 + settings.cached_repeats and cache["errors"] == 0
    # the repeated prompt comes from the cache: all of it but the token computed to answer
    assert cache["cached_tokens"] and all(n > 0 for n in cache["cached_tokens"])
    assert all(n >= cache["prompt_tokens"] // 2 for n in cache["cached_tokens"])
    assert cache["cold_cached_tokens"][0] < cache["prompt_tokens"] // 2  # a unique prompt: (almost) no hit
    assert cache["speedup"] == pytest.approx(cache["cold"]["p50"] / cache["cached"]["p50"])


def test_percentiles_and_settings():
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(range(101), 95) == 95
    assert summary([2.0, 1.0])["mean"] == 1.5 and summary([])["p50"] is None
    assert parse_concurrency("1, 2,4,8") == [1, 2, 4, 8]
    for bad in ("", "1,x", ","):
        with pytest.raises(ValueError, match="concurrency"):
            parse_concurrency(bad)
    for bad in ({"concurrency": ()}, {"concurrency": (0,)}, {"concurrency": (2, 2)}, {"gen_tokens": 1},
                {"prompt_tokens": "64"}, {"repeats": 0}):
        with pytest.raises(ValueError):
            BenchSettings(**bad)
    with pytest.raises(ValueError, match="unknown benchmark settings: nope"):
        BenchSettings.from_dict({"nope": 1})
    assert BenchSettings.from_dict(SMALL.to_dict()) == SMALL
    assert SMALL.total_steps() == 1 + 2 * 2 + 1 + 2
    assert set(PRESETS) == {"small", "default"}


def test_url_target_against_omlx_serve(omlx_server):
    steps = []
    with OpenAITarget(omlx_server.url, "tiny") as target:  # http://host:port gets /v1
        assert target.url == omlx_server.url + "/v1"
        target.check()
        results = run_benchmark(target, SMALL, lambda done, total, message, partial: steps.append((done, total, message)))
    check_results(results, SMALL)
    assert results["target"] == {"kind": "url", "model": "tiny", "url": omlx_server.url + "/v1", "path": None}
    total = SMALL.total_steps()
    assert [d for d, _, _ in steps] == list(range(total + 1)) and {t for _, t, _ in steps} == {total}


def test_url_target_errors(omlx_server):
    with OpenAITarget(omlx_server.url + "/v1", "no-such-model") as target:
        target.check()  # the server answers; the model is refused by the first request
        with pytest.raises(TargetError, match="HTTP 404.*no-such-model"):
            run_benchmark(target, SMALL)
    with pytest.raises(TargetError, match="not an http"):
        OpenAITarget("localhost:8000", "tiny")


def test_engine_target(model_dir):
    target = EngineTarget.from_folder(model_dir("qwen2", "tiny"), "tiny", settings={"paged_ssd_cache_dir": None})
    with target:
        results = run_benchmark(target, SMALL)
        assert target.engine.num_active() == 0
    check_results(results, SMALL)
    assert results["target"]["kind"] == "local" and results["target"]["model"] == "tiny"


# -- `omlx bench` -----------------------------------------------------------------------------


def omlx_bench(home, *args):
    env = dict(os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
    for name in ("OMLX_MODEL_DIR", "OMLX_API_KEY", "OMLX_COLD_CACHE_DIR"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "omlx_site.cli", "bench", *args], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 10_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 500 and height > 200  # the IHDR chunk: a real image, three panels wide


SMALL_FLAGS = ("--concurrency", "1,2", "--prompt-tokens", "32", "--gen-tokens", "4", "--cache-prompt-tokens", "64",
               "--cached-repeats", "2")


def test_cli_local_engine(tmp_path, model_dir):
    home = tmp_path / "home"
    models = home / "models"
    models.mkdir(parents=True)
    os.symlink(model_dir("qwen2", "tiny"), models / "tiny")
    out = omlx_bench(home, "tiny", *SMALL_FLAGS, "--output", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"))
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    check_results(results, SMALL)
    assert results["target"]["kind"] == "local" and results["started_at"]
    check_png(tmp_path / "r.png")
    assert "prefill: 32-token prompts" in out.stdout and "cached TTFT p50 is" in out.stdout
    assert f"{SMALL.total_steps()}/{SMALL.total_steps()} cached prompt" in out.stderr  # the progress lines
    assert "Traceback" not in out.stderr
    # the cold tier of `omlx serve`'s settings ($OMLX_HOME/cache) got the prompts' blocks
    assert any((home / "cache").rglob("*.safetensors"))


def test_cli_url(tmp_path, omlx_server):
    out = omlx_bench(tmp_path, "--url", omlx_server.url + "/v1", "--model", "tiny", "--preset", "small",
                     "--repeats", "2", "--output", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    settings = PRESETS["small"].__class__(**dict(PRESETS["small"].to_dict(), repeats=2))
    check_results(results, settings)
    assert results["target"]["url"] == omlx_server.url + "/v1"


def test_cli_errors(tmp_path, omlx_server, model_dir):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    cases = [
        (("--url", closed, "--model", "tiny"), "nothing answers at"),
        (("--url", omlx_server.url, "--model", "nope", "--preset", "small"), "The model 'nope' does not exist"),
        (("--url", omlx_server.url), "--url needs --model"),
        (("no-such-model", "--model-dir", str(tmp_path)), "unknown model 'no-such-model'"),
        ((str(tmp_path),), "is not a model folder"),
        (("tiny", "--concurrency", "1,x"), "concurrency '1,x'"),
        (("tiny", "--gen-tokens", "1"), "gen_tokens=1"),
    ]
    for args, message in cases:
        out = omlx_bench(tmp_path, *args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


def test_cli_help():
    out = subprocess.run([sys.executable, "-m", "omlx_site.cli", "bench", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for flag in ("--url", "--model", "--api-key", "--concurrency", "--prompt-tokens", "--gen-tokens", "--repeats",
                 "--output", "--plot", "--preset"):
        assert flag in out.stdout
