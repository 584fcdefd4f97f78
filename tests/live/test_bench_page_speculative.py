"""The Benchmark page's speculative decoding (issue 27) through a live `omlx serve`: the form's
method reaches every request of the run, the run records what the engine's counters did (per
decode level and over the run), its page, the runs list and the compare view show them, and runs
from before (no such fields) still render."""

import json
import re
import sqlite3

import httpx

from inference.bench.speculation import COUNTERS
from tests.live.test_bench import FORM, admin, bench_server, db_rows, wait_for_status  # noqa: F401

# The tiny model's random weights loop within a few dozen tokens: prompt lookup drafts from its
# own output then (the decode scenario's prompts are unique filler words, no repeats of their own).
LOOKUP = dict(FORM, speculative="lookup", gen_tokens="32")


def run(bench_server, admin, form) -> tuple:
    """Start a run from the form and wait for it: (id, results, settings)."""
    started = admin.post("/admin/benchmark/", data=form)
    assert started.status_code == 200, started.text
    run_id = max(r[0] for r in db_rows(bench_server.home))
    row = wait_for_status(bench_server.home, run_id)
    assert row[1] == "done" and row[2] == "", row
    return run_id, json.loads(row[3]), json.loads(row[4])


def consistent(spec: dict) -> None:
    assert all(isinstance(spec[k], int) and spec[k] >= 0 for k in COUNTERS), spec
    assert spec["accepted_tokens"] <= spec["drafted_tokens"], spec
    if spec["drafted_tokens"]:
        assert (
            spec["verify_passes"] > 0
            and spec["acceptance"] == spec["accepted_tokens"] / spec["drafted_tokens"]
        )
    if spec["verify_passes"]:  # every pass emits at least the token of its own
        assert spec["emitted_tokens"] >= spec["verify_passes"], spec
        assert spec["tokens_per_pass"] == spec["emitted_tokens"] / spec["verify_passes"]


def cells(html: str, css: str) -> list:
    return [int(v) for v in re.findall(rf'class="num {css}"[^>]*>(\d+)<', html)]


def test_page_runs_lookup_and_shows_its_counters(bench_server, admin):
    page = admin.get("/admin/benchmark/")
    assert '<option value="off" selected>off</option>' in page.text
    assert '<option value="lookup" >lookup</option>' in page.text

    lookup_id, results, settings = run(bench_server, admin, LOOKUP)
    assert settings["speculative"] == results["settings"]["speculative"] == "lookup"
    spec, rows = results["speculative"], [r["speculative"] for r in results["decode"]]
    assert spec["method"] == "lookup" and spec["drafted_tokens"] > 0, spec  # the method reached the engine
    for s in [spec, *rows]:
        consistent(s)
    for key in COUNTERS:  # the levels' readings lie within the run's (prefill, cache: max_tokens 1)
        assert sum(r[key] for r in rows) <= spec[key], (key, spec, rows)

    shown = admin.get(f"/admin/benchmark/runs/{lookup_id}/").text
    assert 'id="bench-speculative" data-method="lookup"' in shown
    assert "speculative decoding lookup (small+custom)" in shown  # the run's settings line
    assert f'<span id="bench-spec-accepted">{spec["accepted_tokens"]}</span>' in shown
    assert f'<span id="bench-spec-drafted">{spec["drafted_tokens"]}</span>' in shown
    assert "tokens per verify pass</th>" in shown
    assert cells(shown, "spec-drafted") == [r["drafted_tokens"] for r in rows]
    assert cells(shown, "spec-accepted") == [r["accepted_tokens"] for r in rows]

    # the form's default: off, with no columns of drafts
    off_id, results, settings = run(bench_server, admin, FORM)
    assert settings["speculative"] == "off" and results["speculative"]["method"] == "off"
    assert results["speculative"]["drafted_tokens"] == 0
    shown = admin.get(f"/admin/benchmark/runs/{off_id}/").text
    assert 'data-method="off"' in shown and "tokens per verify pass" not in shown

    # a run from before speculative decoding was recorded (its results and settings have none)
    old = dict({k: v for k, v in results.items() if k != "speculative"}, version=1)
    old["settings"] = {k: v for k, v in results["settings"].items() if k != "speculative"}
    old["decode"] = [{k: v for k, v in r.items() if k != "speculative"} for r in results["decode"]]
    with sqlite3.connect(bench_server.home / "omlx.sqlite3") as db:
        old_id = db.execute(
            "INSERT INTO admin_panel_benchmarkrun (created, status, model, target, settings, results, error, "
            "progress_done, progress_total, progress_message, worker) "
            "VALUES (datetime('now'), 'done', 'tiny', 'local', ?, ?, '', 7, 7, 'done', '')",
            (json.dumps(dict(old["settings"], preset="small")), json.dumps(old)),
        ).lastrowid
    shown = admin.get(f"/admin/benchmark/runs/{old_id}/")
    assert (
        shown.status_code == 200
        and 'id="bench-decode"' in shown.text
        and "bench-speculative" not in shown.text
    )
    listed = admin.get("/admin/benchmark/").text
    assert re.search(rf'id="bench-run-{lookup_id}">.*?, lookup [\d.]+% accepted</td>', listed, re.S)

    row = compare_row(admin, [lookup_id, off_id], "speculative decoding")  # columns: oldest first
    assert row == ["lookup", "off"]
    assert compare_row(admin, [lookup_id, off_id], "drafted tokens") == [str(spec["drafted_tokens"]), "0"]
    assert (
        compare_row(admin, [lookup_id, off_id], "tokens per verify pass")[0]
        == f"{spec['tokens_per_pass']:.2f}"
    )
    # the old run (created by SQLite, in the same second: its column may come first) has "-"
    assert sorted(compare_row(admin, [lookup_id, off_id, old_id], "speculative decoding")) == [
        "-",
        "lookup",
        "off",
    ]


def compare_row(admin, runs: list, name: str) -> list:
    """The cells of the compare table's row ``name`` for ``runs``."""
    compared = admin.get("/admin/benchmark/compare/", params={"runs": runs})
    assert compared.status_code == 200, compared.text
    row = re.search(rf"<tr><td>{name}</td>(.*?)</tr>", compared.text, re.S)
    assert row, compared.text
    return re.findall(r'<td class="num">(.*?)</td>', row.group(1))


def test_page_refuses_unknown_methods_and_draft_without_a_draft_model(bench_server, admin):
    for value, message in (
        ("ngram", "Speculative decoding: &#x27;ngram&#x27; is not one of off, lookup, suffix, draft"),
        ("draft", "the model &#x27;tiny&#x27; has no draft model"),
    ):
        before = len(db_rows(bench_server.home))
        response = admin.post("/admin/benchmark/", data=dict(FORM, speculative=value))
        assert response.status_code == 400 and message in response.text, (value, response.text)
        assert 'id="bench-form-error"' in response.text and len(db_rows(bench_server.home)) == before


def test_page_runs_draft_with_the_models_draft_model(bench_server, admin):
    """A run with "draft" once the model has a draft model (here itself, which shares its
    weights): accepted, and the engine drafted with it for the run's requests."""
    from tests.live.test_bench import API_KEY

    api = {"Authorization": f"Bearer {API_KEY}"}

    def set_draft(value):
        patched = httpx.patch(
            bench_server.url + "/v1/models/tiny/settings",
            json={"draft_model": value},
            headers=api,
            timeout=60,
        )
        assert patched.status_code == 200 and patched.json()["draft_model"] == value, patched.text
        # a loaded model takes its draft model when it is next loaded
        unloaded = httpx.post(bench_server.url + "/v1/models/tiny/unload", headers=api, timeout=60)
        assert unloaded.status_code == 200 and unloaded.json()["loaded"] is False, unloaded.text

    set_draft("tiny")
    try:
        draft_id, results, settings = run(
            bench_server, admin, dict(FORM, speculative="draft", gen_tokens="16")
        )
        assert settings["speculative"] == results["settings"]["speculative"] == "draft"
        spec = results["speculative"]
        consistent(spec)
        # the tiny model drafting for itself: its drafts are its own greedy tokens
        assert spec["method"] == "draft" and spec["drafted_tokens"] > 0 and spec["accepted_tokens"] > 0, spec
        shown = admin.get(f"/admin/benchmark/runs/{draft_id}/").text
        assert 'id="bench-speculative" data-method="draft"' in shown
    finally:
        set_draft(None)
