"""`omlx bench --scenario agentic --speculative METHOD` as the real command line against a live
`omlx serve`: every request carries the method, and the run reports what the server's own
/metrics counters did over it (inference.bench.speculation)."""

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
    before = server_counters(omlx_server.url)
    assert before["drafted_tokens"] > 0, before
    out = omlx_bench(
        tmp_path,
        "--url",
        omlx_server.url,
        "--model",
        "tiny",
        "--scenario",
        "agentic",
        "--preset",
        "small",
        "--speculative",
        "lookup",
        "--output",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    after = server_counters(omlx_server.url)
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["version"] == 3 and results["settings"]["speculative"] == "lookup"
    assert results["summary"]["ok"] == 6, results["errors"]
    spec = results["speculative"]
    # The server (whose model setting is off) drafted for these requests: the override reached it.
    # The warm-up request before the first reading may have drafted too, hence <=.
    assert spec["method"] == "lookup" and spec["drafted_tokens"] > 0, spec
    for key in COUNTERS:
        assert 0 <= spec[key] <= after[key] - before[key], (key, spec, before, after)
    assert spec["accepted_tokens"] <= spec["drafted_tokens"] and spec["verify_passes"] > 0
    assert spec["acceptance"] == spec["accepted_tokens"] / spec["drafted_tokens"]
    assert spec["tokens_per_pass"] == spec["emitted_tokens"] / spec["verify_passes"]
    line = f"speculative lookup: accepted {spec['accepted_tokens']}/{spec['drafted_tokens']} drafted"
    assert line in out.stdout, out.stdout
    # no drafts between the run's last request and our reading: the run's own figures are the last
    assert parse_metrics(httpx.get(omlx_server.url + "/metrics").text, "tiny") == after


def test_cli_speculative_errors(tmp_path):
    for args, message in (
        (("tiny", "--speculative", "lookup"), "--speculative is for --scenario agentic"),
        (("tiny", "--scenario", "agentic", "--speculative", "ngram"), "invalid choice: 'ngram'"),
    ):
        out = omlx_bench(tmp_path, *args)
        assert out.returncode != 0 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
