"""`omlx bench --scenario accuracy` end to end, with the tiny test model and two HumanEval
problems: against a live `omlx serve` (--url: HumanEval and perplexity through the API), against
the local engine (perplexity too), and from the console's Benchmark page (a Huey task)."""

import json
import os

from inference.bench import perplexity
from inference.engine.model_loader import load_model
from tests.live.test_bench import admin, bench_server, db_rows, omlx_bench, wait_for_status  # noqa: F401

FLAGS = ("--scenario", "accuracy", "--limit", "2", "--max-tokens", "16")


def check_humaneval(results, problems=2):
    he = results["humaneval"]
    assert he["problems"] == he["done"] == problems and len(he["rows"]) == problems
    assert [r["task_id"] for r in he["rows"]] == [f"HumanEval/{i}" for i in range(problems)]
    # random weights write no working code; each program ran and failed cleanly
    assert all(r["reason"] in ("passed", "failed", "timed out", "killed") for r in he["rows"])
    assert he["pass_at_1"] == he["passed"] / problems
    assert results["errors"] == []


def test_cli_url(tmp_path, omlx_server, model_dir):
    out = omlx_bench(
        tmp_path, "--url", omlx_server.url, "--model", "tiny", *FLAGS, "--output", str(tmp_path / "r.json")
    )
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["scenario"] == "accuracy" and results["target"]["kind"] == "url"
    check_humaneval(results)
    # perplexity from the server's echo logprobs: the local engine's value on the same folder
    loaded = load_model(model_dir("qwen2", "tiny"), dtype="float32")
    want = perplexity.perplexity_of(
        perplexity.token_logprobs(loaded.model, list(loaded.tokenizer.encode(perplexity.text())))
    )
    ppl = results["perplexity"]
    assert ppl["via"] == "echo logprobs" and ppl["tokens"] > 300
    assert abs(ppl["perplexity"] - want) < 1e-4 * want
    assert "HumanEval pass@1" in out.stdout and "nats, from the API)" in out.stdout
    assert "Traceback" not in out.stderr


def test_cli_local_engine_and_flag_checks(tmp_path, model_dir):
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    os.symlink(model_dir("qwen2", "tiny"), home / "models" / "tiny")
    out = omlx_bench(home, "tiny", *FLAGS, "--output", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    check_humaneval(results)
    ppl = results["perplexity"]
    assert ppl["tokens"] > 300 and ppl["perplexity"] > 1 and ppl["text"] == "perplexity.txt"
    assert f"perplexity: {ppl['perplexity']:.3f}" in out.stdout
    for flags, message in [
        (("--limit", "165"), "limit=165: must be an integer in [0, 164]"),
        (("--gen-tokens", "4"), "--gen-tokens is not for --scenario accuracy"),
        (("--concurrency", "1,2"), "takes one number"),
    ]:
        refused = omlx_bench(home, "tiny", "--scenario", "accuracy", *flags)
        assert refused.returncode == 1 and message in refused.stderr, (flags, refused.stderr)
    refused = omlx_bench(home, "tiny", "--limit", "2")
    assert refused.returncode == 1 and "--limit is for --scenario accuracy" in refused.stderr


def test_console_runs_the_accuracy_suite(bench_server, admin):  # noqa: F811
    form = {"model": "tiny", "preset": "small", "scenario": "accuracy", "limit": "2"}
    started = admin.post("/admin/benchmark/", data=form)
    assert started.status_code == 200, started.text
    run_id = max(r[0] for r in db_rows(bench_server.home))
    row = wait_for_status(bench_server.home, run_id)
    assert row[1] == "done" and row[2] == "", row
    results = json.loads(row[3])
    check_humaneval(results)
    assert results["perplexity"]["tokens"] > 300
    assert json.loads(row[4])["scenario"] == "accuracy" and row[5] == row[6] == 3
    shown = admin.get(f"/admin/benchmark/runs/{run_id}/")
    assert shown.status_code == 200 and 'id="bench-perplexity"' in shown.text
    assert 'id="bench-humaneval"' in shown.text and "HumanEval/1" in shown.text
    bad = admin.post("/admin/benchmark/", data=dict(form, limit="999"))
    assert bad.status_code == 400 and "HumanEval problems" in bad.text
