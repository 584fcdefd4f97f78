"""The Benchmark page in Chromium: start a small benchmark, watch its progress and charts update over
the websocket, find it in the list of runs, compare two runs, delete one."""

import re

from playwright.sync_api import expect

# Records, at every change of the page, the run's step count and the points its charts drew, so
# the test can tell that progress advanced and the charts grew while the run was going.
RECORDER = """
window.benchLog = [];
new MutationObserver(() => {
  const progress = document.querySelector('#bench-progress');
  if (!progress) return;
  const points = [...document.querySelectorAll('#bench-results svg.chart')]
    .reduce((sum, svg) => sum + Number(svg.dataset.points || 0), 0);
  const last = window.benchLog[window.benchLog.length - 1];
  const entry = {done: Number(progress.dataset.done), status: progress.dataset.status, points: points};
  if (!last || last.done !== entry.done || last.points !== entry.points || last.status !== entry.status)
    window.benchLog.push(entry);
}).observe(document.body, {childList: true, subtree: true});
"""


def start_run(page, **fields):
    page.select_option("#bench-form select[name=model]", "tiny")
    page.select_option("#bench-form select[name=preset]", "small")
    for name, value in fields.items():
        page.fill(f"#bench-form input[name={name}]", value)
    with page.expect_response(
        lambda r: r.request.method == "POST" and r.url.endswith("/admin/benchmark/")
    ) as answer:
        page.click("#bench-run")
    assert answer.value.status == 200, answer.value.text()
    run_id = int(re.search(r"Benchmark #(\d+) of tiny queued", answer.value.text()).group(1))
    expect(page.locator("#bench-started")).to_contain_text(f"#{run_id} ")
    return run_id


def test_benchmark_page(page, admin_server, shot):
    page.goto(admin_server.url + "/admin/benchmark/")
    expect(page.locator("h1")).to_have_text("Benchmark")
    shot(page, "benchmark-empty")

    # a bad value: the message shows on the page, nothing starts
    page.fill("#bench-form input[name=concurrency]", "1,x")
    page.click("#bench-run")
    expect(page.locator("#bench-form-error")).to_contain_text("integers separated by commas")

    page.evaluate(RECORDER)
    # sized to take a few seconds on the tiny model, so that several steps arrive over the socket
    run_id = start_run(page, concurrency="1,2", prompt_tokens="256", gen_tokens="48", repeats="3")
    expect(page.locator(f'#bench-live [data-run="{run_id}"]')).to_be_visible()
    expect(page.locator("#bench-status")).to_have_text("done", timeout=120_000)
    log = page.evaluate("window.benchLog")
    done_seen = [e["done"] for e in log]
    assert len(set(done_seen)) >= 3 and done_seen == sorted(done_seen), log  # progress advanced step by step
    points_seen = [e["points"] for e in log]
    assert points_seen[-1] > 0 and len(set(points_seen)) >= 2 and points_seen == sorted(points_seen), log
    # the finished run: 2 levels x (prefill + decode), 3 TTFT quantiles x 2 levels, 3 x cold/cached bars
    charts = page.locator("#bench-results svg.chart")
    expect(charts).to_have_count(3)
    assert [int(c.get_attribute("data-points")) for c in charts.all()] == [6, 6, 6]
    expect(page.locator("#bench-prefill tr")).to_have_count(3)
    expect(page.locator("#bench-decode tr")).to_have_count(3)
    expect(page.locator("#bench-speedup")).to_contain_text("x")
    row = page.locator(f"#bench-run-{run_id}")
    expect(row).to_contain_text("done")  # the list of runs was updated when it finished
    shot(page, "benchmark-run")

    # the second run asks for prompt lookup (the first: the form's default, off)
    expect(page.locator("#bench-speculative")).to_have_attribute("data-method", "off")
    page.select_option("#bench-form select[name=speculative]", "lookup")
    second = start_run(page, concurrency="1,2", prompt_tokens="32", gen_tokens="4", repeats="1")
    expect(page.locator(f"#bench-run-{second}")).to_contain_text("done", timeout=120_000)
    expect(page.locator(f"#bench-run-{second}")).to_contain_text("lookup")
    page.check(f"#bench-run-{run_id} input[name=runs]")
    page.check(f"#bench-run-{second} input[name=runs]")
    page.click("#bench-compare-button")
    table = page.locator("#bench-compare-table")
    expect(table).to_contain_text(f"#{run_id} tiny")
    expect(table).to_contain_text(f"#{second} tiny")
    expect(page.locator("#bench-compare svg.chart")).to_have_count(3)
    methods = table.locator("tr", has_text="speculative decoding").locator("td")
    expect(methods).to_have_text(["speculative decoding", "off", "lookup"])
    shot(page, "benchmark-compare")

    page.on("dialog", lambda dialog: dialog.accept())
    page.click(f"#bench-run-{second} >> text=Delete")
    expect(page.locator(f"#bench-run-{second}")).to_have_count(0)
    expect(page.locator(f"#bench-run-{run_id}")).to_be_visible()


def test_benchmark_page_runs_the_accuracy_suite(page, admin_server, shot):
    page.goto(admin_server.url + "/admin/benchmark/")
    page.select_option("#bench-form select[name=scenario]", "accuracy")
    run_id = start_run(page, limit="2")
    expect(page.locator("#bench-status")).to_have_text("done", timeout=120_000)
    expect(page.locator(f'#bench-live [data-run="{run_id}"] #bench-perplexity')).to_be_visible()
    expect(page.locator("#bench-pass-at-1")).to_contain_text("%")
    expect(page.locator("#bench-humaneval tr")).to_have_count(3)  # the head and two problems
    expect(page.locator(f"#bench-run-{run_id}")).to_contain_text("pass@1")
    shot(page, "benchmark-accuracy")
