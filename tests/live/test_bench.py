"""The benchmark (inference.bench): its core against a live `omlx serve` over the OpenAI URL
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

from inference.bench import (
    PRESETS,
    BenchSettings,
    EngineTarget,
    OpenAITarget,
    TargetError,
    parse_concurrency,
    run_benchmark,
)
from inference.bench.stats import percentile, summary
from tests.support.server import ServerProcess

SMALL = BenchSettings(
    concurrency=(1, 2), prompt_tokens=32, gen_tokens=4, repeats=1, cache_prompt_tokens=64, cached_repeats=2
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_results(results, settings, exact_tokens=True):
    """The shape and counts every run has, whoever the target."""
    assert results["version"] == 2 and results["errors"] == []
    # the speculative counters' differences: recorded (null where the target has none) per level
    assert "speculative" in results and all("speculative" in r for r in results["decode"])
    assert results["settings"] == settings.to_dict()
    assert results["finished_at"] and results["duration_s"] > 0
    levels = list(settings.concurrency)
    assert [r["concurrency"] for r in results["prefill"]] == levels
    assert [r["concurrency"] for r in results["decode"]] == levels
    for row in results["prefill"]:
        c = row["concurrency"]
        assert row["requests"] == row["ok"] == c * settings.repeats and row["errors"] == 0
        # prompts are written from filler words, calibrated in tokens: about the size asked
        assert abs(row["prompt_tokens"] - settings.prompt_tokens) <= settings.prompt_tokens / 4 + 4, row
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
    for bad in (
        {"concurrency": ()},
        {"concurrency": (0,)},
        {"concurrency": (2, 2)},
        {"gen_tokens": 1},
        {"prompt_tokens": "64"},
        {"repeats": 0},
    ):
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
        results = run_benchmark(
            target, SMALL, lambda done, total, message, partial: steps.append((done, total, message))
        )
    check_results(results, SMALL)
    assert results["target"] == {
        "kind": "url",
        "model": "tiny",
        "url": omlx_server.url + "/v1",
        "path": None,
        "endpoint": "completions",
    }
    total = SMALL.total_steps()
    assert [d for d, _, _ in steps] == list(range(total + 1)) and {t for _, t, _ in steps} == {total}


def test_url_target_chat_endpoint(omlx_server):
    # the prompt goes as one user message: the chat template's tokens are measured by the calibration
    with OpenAITarget(omlx_server.url + "/v1", "tiny", endpoint="chat") as target:
        results = run_benchmark(target, SMALL)
    check_results(results, SMALL)
    assert results["target"]["endpoint"] == "chat"


def test_url_target_errors(omlx_server):
    with OpenAITarget(omlx_server.url + "/v1", "no-such-model") as target:
        target.check()  # the server answers; the model is refused by the first request
        with pytest.raises(TargetError, match="HTTP 404.*no-such-model"):
            run_benchmark(target, SMALL)
    with pytest.raises(TargetError, match="not an http"):
        OpenAITarget("localhost:8000", "tiny")


def test_engine_target(model_dir):
    target = EngineTarget.from_folder(
        model_dir("qwen2", "tiny"), "tiny", settings={"paged_ssd_cache_dir": None}
    )
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
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "bench", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def check_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 10_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 500 and height > 200  # the IHDR chunk: a real image, three panels wide


SMALL_FLAGS = (
    "--concurrency",
    "1,2",
    "--prompt-tokens",
    "32",
    "--gen-tokens",
    "4",
    "--cache-prompt-tokens",
    "64",
    "--cached-repeats",
    "2",
)


def test_cli_local_engine(tmp_path, model_dir):
    home = tmp_path / "home"
    models = home / "models"
    models.mkdir(parents=True)
    os.symlink(model_dir("qwen2", "tiny"), models / "tiny")
    out = omlx_bench(
        home, "tiny", *SMALL_FLAGS, "--output", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")
    )
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
    out = omlx_bench(
        tmp_path,
        "--url",
        omlx_server.url + "/v1",
        "--model",
        "tiny",
        "--preset",
        "small",
        "--repeats",
        "2",
        "--output",
        str(tmp_path / "r.json"),
    )
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
        (
            ("--url", omlx_server.url, "--model", "nope", "--preset", "small"),
            "The model 'nope' does not exist",
        ),
        (("--url", omlx_server.url), "--url needs --model"),
        (("no-such-model", "--model-dir", str(tmp_path)), "unknown model 'no-such-model'"),
        ((str(tmp_path),), "is not a model folder"),
        (("tiny", "--concurrency", "1,x"), "concurrency '1,x'"),
        (("tiny", "--gen-tokens", "1"), "gen_tokens=1"),
        (("tiny", "--endpoint", "chat"), "--endpoint go with --url"),
    ]
    for args, message in cases:
        out = omlx_bench(tmp_path, *args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


def test_cli_help():
    out = subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "bench", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for flag in (
        "--url",
        "--model",
        "--api-key",
        "--concurrency",
        "--prompt-tokens",
        "--gen-tokens",
        "--repeats",
        "--output",
        "--plot",
        "--preset",
        "--scenario",
        "--mode",
        "--burst",
    ):
        assert flag in out.stdout
    assert "{closed,burst}" in out.stdout  # --mode's choices


def test_cli_refused_key(tmp_path, bench_server):
    out = omlx_bench(tmp_path, "--url", bench_server.url, "--model", "tiny", "--api-key", "wrong")
    assert out.returncode == 1 and "refused the API key (HTTP 401" in out.stderr, out.stderr
    out = omlx_bench(tmp_path, "--url", bench_server.url, "--model", "tiny")  # no key at all
    assert out.returncode == 1 and "refused the API key" in out.stderr, out.stderr


# -- the Benchmark page's Huey task, through a live server ---------------------------------------

API_KEY = "bench-key"


def db_rows(
    home,
    sql="SELECT id, status, error, results, settings, progress_done, progress_total "
    "FROM admin_panel_benchmarkrun ORDER BY id",
):
    with sqlite3.connect(home / "omlx.sqlite3") as db:
        return db.execute(sql).fetchall()


def insert_run(home, status):
    with sqlite3.connect(home / "omlx.sqlite3") as db:
        cursor = db.execute(
            "INSERT INTO admin_panel_benchmarkrun (created, status, model, target, settings, error, "
            "progress_done, progress_total, progress_message, worker) "
            "VALUES (datetime('now'), ?, 'tiny', 'local', ?, '', 0, 7, '', '')",
            (status, json.dumps(SMALL.to_dict())),
        )
        return cursor.lastrowid


@pytest.fixture(scope="module")
def bench_server(tmp_path_factory, model_dir):
    """A live `omlx serve` with an API key, started on a database that holds a run left "running"
    and one left "queued" by a previous server (``interrupted``: their ids)."""
    import shutil

    home = tmp_path_factory.mktemp("bench-home")
    models = tmp_path_factory.mktemp("bench-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    env = dict(os.environ, OMLX_HOME=str(home), OMLX_DATABASE=str(home / "omlx.sqlite3"))
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], env=env, check=True, timeout=300)
    interrupted = [insert_run(home, "running"), insert_run(home, "queued")]
    server = ServerProcess(["--model-dir", str(models), "--api-key", API_KEY], home)
    server.home, server.interrupted = home, interrupted
    yield server
    server.stop()


@pytest.fixture
def admin(bench_server):
    """An httpx client logged in to the console; ``post`` sends the CSRF header as htmx does."""
    client = httpx.Client(base_url=bench_server.url, timeout=60)
    client.get("/admin/login/")
    response = client.post(
        "/admin/login/",
        data={
            "api_key": API_KEY,
            "csrfmiddlewaretoken": client.cookies["omlx_csrftoken"],
            "next": "/admin/benchmark/",
        },
        headers={"Referer": bench_server.url + "/admin/login/"},
    )
    assert response.status_code == 302, response.text
    client.headers.update(
        {
            "X-CSRFToken": client.cookies["omlx_csrftoken"],
            "Referer": bench_server.url + "/admin/benchmark/",
            "HX-Request": "true",
        }
    )
    yield client
    client.close()


def wait_for_status(home, run_id, statuses=("done", "failed"), timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = next(r for r in db_rows(home) if r[0] == run_id)
        if row[1] in statuses:
            return row
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} still {row[1]} after {timeout} s")


FORM = {
    "model": "tiny",
    "preset": "small",
    "concurrency": "1,2",
    "prompt_tokens": "32",
    "gen_tokens": "4",
    "repeats": "1",
}


def test_interrupted_runs_marked_failed_at_start(bench_server):
    rows = {r[0]: r for r in db_rows(bench_server.home)}
    for run_id in bench_server.interrupted:
        assert rows[run_id][1] == "failed" and rows[run_id][2].startswith("interrupted"), rows[run_id]
    assert any("marked failed (interrupted)" in line for line in bench_server.output)


def test_page_runs_the_benchmark_task(bench_server, admin):
    assert httpx.get(bench_server.url + "/admin/benchmark/").status_code == 302  # not logged in
    page = admin.get("/admin/benchmark/")
    assert page.status_code == 200 and 'name="model"' in page.text and ">tiny<" in page.text
    started = admin.post("/admin/benchmark/", data=FORM)
    assert started.status_code == 200, started.text
    run_id = max(r[0] for r in db_rows(bench_server.home))
    assert f"Benchmark #{run_id} of tiny queued" in started.text
    assert f'ws-connect="/ws/admin/benchmark/{run_id}/"' in started.text  # the page follows it live
    row = wait_for_status(bench_server.home, run_id)
    assert row[1] == "done" and row[2] == "", row
    settings = BenchSettings(
        concurrency=(1, 2),
        prompt_tokens=32,
        gen_tokens=4,
        repeats=1,
        cache_prompt_tokens=128,
        cached_repeats=2,
        speculative="off",  # the form's default
    )
    check_results(json.loads(row[3]), settings)
    assert json.loads(row[4])["preset"] == "small+custom" and row[5] == row[6] == settings.total_steps()
    assert json.loads(row[3])["target"]["kind"] == "local"
    # the finished run: its page fragment has the tables and charts, no socket
    shown = admin.get(f"/admin/benchmark/runs/{run_id}/")
    assert shown.status_code == 200 and 'id="bench-prefill"' in shown.text and "ws-connect" not in shown.text
    assert shown.text.count('class="chart"') == 3
    # a second run, then both compared
    assert admin.post("/admin/benchmark/", data=FORM).status_code == 200
    second = max(r[0] for r in db_rows(bench_server.home))
    assert wait_for_status(bench_server.home, second)[1] == "done"
    compared = admin.get("/admin/benchmark/compare/", params={"runs": [run_id, second]})
    assert (
        compared.status_code == 200
        and f"#{run_id} tiny" in compared.text
        and f"#{second} tiny" in compared.text
    )
    assert compared.text.count('class="chart"') == 3
    assert admin.get("/admin/benchmark/compare/", params={"runs": [run_id]}).status_code == 400
    # the API still answers while nothing runs, and the run can be deleted
    deleted = admin.post(f"/admin/benchmark/runs/{second}/delete/")
    assert deleted.status_code == 200 and f"bench-run-{second}" not in deleted.text
    assert second not in [r[0] for r in db_rows(bench_server.home)]


def test_page_refuses_bad_values_and_a_second_run(bench_server, admin):
    cases = [
        ({"model": ""}, "Choose a model."),
        ({"model": "nope"}, "The model &#x27;nope&#x27; does not exist"),
        ({"concurrency": "1,x"}, "give integers separated by commas"),
        ({"gen_tokens": "1"}, "gen tokens=1: must be an integer in [2, 100000]"),
        ({"repeats": "two"}, "repeats: &#x27;two&#x27; is not a whole number"),
        ({"preset": "huge"}, "Unknown preset"),
    ]
    for change, message in cases:
        response = admin.post("/admin/benchmark/", data=dict(FORM, **change))
        assert response.status_code == 400 and message in response.text, (change, response.text)
        assert 'id="bench-form-error"' in response.text
    busy = insert_run(bench_server.home, "running")
    response = admin.post("/admin/benchmark/", data=FORM)
    assert response.status_code == 400 and f"Benchmark #{busy} (tiny) is running" in response.text
    response = admin.post(f"/admin/benchmark/runs/{busy}/delete/")
    assert response.status_code == 409 and "is running" in response.text
    with sqlite3.connect(bench_server.home / "omlx.sqlite3") as db:
        db.execute("UPDATE admin_panel_benchmarkrun SET status = 'failed' WHERE id = ?", (busy,))
    assert admin.post(f"/admin/benchmark/runs/{busy}/delete/").status_code == 200
    assert admin.post("/admin/benchmark/runs/999999/delete/").status_code == 404
    assert admin.get("/admin/benchmark/runs/999999/").status_code == 404


def test_api_is_served_while_a_benchmark_runs(bench_server, admin):
    # A long run holds one of the server's two Huey worker threads; the API keeps the other.
    form = dict(FORM, gen_tokens="400", repeats="4")
    assert admin.post("/admin/benchmark/", data=form).status_code == 200
    run_id = max(r[0] for r in db_rows(bench_server.home))
    wait_for_status(bench_server.home, run_id, statuses=("running",))
    response = httpx.post(
        bench_server.url + "/v1/completions",
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"model": "tiny", "prompt": "hello", "max_tokens": 4},
        timeout=60,
    )
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 4
    assert next(r for r in db_rows(bench_server.home) if r[0] == run_id)[1] == "running"
    assert wait_for_status(bench_server.home, run_id)[1] == "done"


def test_a_server_with_one_worker_thread_refuses_benchmarks(tmp_path, model_dir):
    import shutil

    models = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    server = ServerProcess(["--model-dir", str(models), "--workers", "1"], tmp_path / "home")
    try:
        client = httpx.Client(base_url=server.url, timeout=60, headers={"HX-Request": "true"})
        assert client.get("/admin/benchmark/").status_code == 200  # no API key: the console is open
        client.headers["X-CSRFToken"] = client.cookies["omlx_csrftoken"]
        response = client.post("/admin/benchmark/", data=FORM)
        assert (
            response.status_code == 400 and "only one (--workers 1): it would stall the API" in response.text
        )
        assert db_rows(tmp_path / "home") == []
        client.close()
    finally:
        server.stop()
