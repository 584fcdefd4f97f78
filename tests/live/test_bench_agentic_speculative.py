"""`omlx bench --speculative METHOD` (the agentic and the default scenario) as the real command
line against a live `omlx serve`: every request carries the method, and the run reports what the
server's own /metrics counters did over it (inference.bench.speculation)."""

import json
import re

import httpx

from inference.bench.speculation import COUNTERS, parse_metrics
from tests.live.test_bench import omlx_bench


def server_counters(url: str) -> dict:
    """The tiny model's omlx_speculative_* counters, read here with a pattern of its own (0 while
    the model is not loaded: its series are absent then)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for key in COUNTERS:
        match = re.search(rf'^omlx_speculative_{key}_total\{{model="tiny"\}} (\S+)$', text, re.M)
        out[key] = int(float(match.group(1))) if match else 0
    return out


def bench_lookup(tmp_path, url: str, *flags) -> tuple:
    """`omlx bench --url URL --model tiny --preset small --speculative lookup FLAGS`, which must
    succeed: (its output, its results, the server's counters before it and after it)."""
    before = server_counters(url)
    out = omlx_bench(
        tmp_path,
        *("--url", url, "--model", "tiny", "--preset", "small", *flags),
        *("--speculative", "lookup", "--output", str(tmp_path / "r.json")),
    )
    assert out.returncode == 0, out.stderr
    return out, json.loads((tmp_path / "r.json").read_text()), before, server_counters(url)


def check_run(out, results, before, after) -> dict:
    """The run's counters (``results["speculative"]``): lookup drafted (the override reached the
    server, whose model setting is off), within what the server counted over the command (its
    warm-up request before the first reading may have drafted too, hence <=), consistent, and
    the summary's line."""
    assert results["settings"]["speculative"] == "lookup"
    spec = results["speculative"]
    assert spec["method"] == "lookup" and spec["drafted_tokens"] > 0, spec
    for key in COUNTERS:
        assert 0 <= spec[key] <= after[key] - before[key], (key, spec, before, after)
    assert spec["accepted_tokens"] <= spec["drafted_tokens"] and spec["verify_passes"] > 0
    assert spec["acceptance"] == spec["accepted_tokens"] / spec["drafted_tokens"]
    assert spec["tokens_per_pass"] == spec["emitted_tokens"] / spec["verify_passes"]
    line = f"speculative lookup: accepted {spec['accepted_tokens']}/{spec['drafted_tokens']} drafted"
    assert line in out.stdout, out.stdout
    return spec


def test_cli_url_lookup_counts_drafts(tmp_path, omlx_server):
    # Drafts before the run, so that a run that did not subtract them would be seen.
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "abc abc abc abc abc abc abc abc"}],
        "max_tokens": 32,
        "temperature": 0,
        "ignore_eos": True,
        "speculative": True,
    }
    assert httpx.post(omlx_server.url + "/v1/chat/completions", json=body, timeout=120).status_code == 200
    assert server_counters(omlx_server.url)["drafted_tokens"] > 0
    # 64 tokens a turn: the tiny model's answers loop within them, which lookup drafts (and
    # drafting is decided by measured prices: a run of 8 tokens a turn may never draft)
    out, results, before, after = bench_lookup(
        tmp_path, omlx_server.url, "--scenario", "agentic", "--gen-tokens", "64"
    )
    assert results["version"] == 3 and results["summary"]["ok"] == 6, results["errors"]
    check_run(out, results, before, after)
    # no drafts between the run's last request and our reading: the run's own figures are the last
    assert parse_metrics(httpx.get(omlx_server.url + "/metrics").text, "tiny") == after


def test_cli_url_default_scenario_lookup(tmp_path, omlx_server):
    """The default scenario (prefill, decode, cold vs cached) with --speculative: the run's
    counters and each decode level's, in the JSON and the summary."""
    out, results, before, after = bench_lookup(tmp_path, omlx_server.url, "--gen-tokens", "64")
    assert results["errors"] == []
    spec = check_run(out, results, before, after)
    levels = [row["speculative"] for row in results["decode"]]
    assert all(level["method"] == "lookup" for level in levels), levels
    # the decode levels are part of the run: their drafts are within the run's
    assert 0 < sum(level["drafted_tokens"] for level in levels) <= spec["drafted_tokens"], (levels, spec)
    assert "accepted / drafted" in out.stdout, out.stdout


def test_cli_speculative_errors(tmp_path):
    for args, message in (
        (
            ("tiny", "--scenario", "accuracy", "--speculative", "lookup"),
            "--speculative is not for --scenario accuracy",
        ),
        (("tiny", "--speculative", "ngram"), "invalid choice: 'ngram'"),
        (("tiny", "--scenario", "agentic", "--speculative", "ngram"), "invalid choice: 'ngram'"),
    ):
        out = omlx_bench(tmp_path, *args)
        assert out.returncode != 0 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
