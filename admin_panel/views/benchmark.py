"""The Benchmark page: start a run (a Huey task, admin_panel/tasks.py), follow it over the
websocket of admin_panel/consumers/benchmark.py, look at past runs, compare them, delete them.

A run is of the speed scenarios (``inference.bench.run_benchmark``) or of the accuracy suite
(``run_accuracy``: perplexity and HumanEval pass@1), chosen on the form. A speed run asks for the
speculative decoding method of the form (off by default) and records what the engine's counters
did (``inference.bench.speculation``): per decode level, and over the run.

The rendering helpers (``progress_html``, ``results_html``, ``runs_html``) are shared with the
consumer: the page and the socket draw the same fragments.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

from django.http import HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from admin_panel import charts
from admin_panel.auth import admin_required
from inference.bench import ACCURACY_PRESETS, PRESETS, parse_concurrency
from inference.bench.speculation import METHODS
from admin_panel.models import BenchmarkRun
from admin_panel.tasks import BenchmarkRefused, fail_lost_runs, start_benchmark
from admin_panel.views import shows_errors
from inference.pool import get_pool

RUNS_LISTED = 50
_NUMBER_FIELDS = ("prompt_tokens", "gen_tokens", "repeats")
MODEL_SETTING = "model"  # the form's value for "the model's own speculative setting" (None)
SPECULATIVE_CHOICES = [(m, m) for m in METHODS] + [(MODEL_SETTING, "the model's setting")]


def _ms(seconds) -> Optional[float]:
    return None if seconds is None else seconds * 1000.0


def speculative_label(settings: Optional[dict]) -> Optional[str]:
    """The speculative decoding a speed run asked for, in words; None for a run that predates it
    (its settings have no ``speculative``) and for accuracy runs."""
    settings = settings or {}
    if "speculative" not in settings or settings.get("scenario") == "accuracy":
        return None
    return settings["speculative"] or "the model's setting"


def results_context(results: Optional[dict]) -> dict:
    """Rows and charts of one run's results (complete or so far)."""
    results = results or {}
    method = speculative_label(results.get("settings"))
    prefill, decode, cache = results.get("prefill") or [], results.get("decode") or [], results.get("cache")
    levels = sorted({r["concurrency"] for r in prefill + decode})
    x_labels = [(c, str(c)) for c in levels]

    def series(rows, key):
        return [(r["concurrency"], r["tokens_per_s"][key]) for r in rows]

    speed = charts.line_chart(
        [
            ("prefill, aggregate", series(prefill, "aggregate")),
            ("decode, aggregate", series(decode, "aggregate")),
            ("decode, per stream", series(decode, "per_stream")),
        ],
        title="tokens/s",
        y_label="tokens/s",
        x_labels=x_labels,
        width=560,
        height=240,
    )
    ttft = charts.line_chart(
        [
            (f"TTFT {q}", [(r["concurrency"], _ms(r["ttft_s"][q])) for r in prefill])
            for q in ("p50", "p95", "p99")
        ],
        title="prefill TTFT, ms",
        y_label="ms",
        x_labels=x_labels,
        width=560,
        height=240,
    )
    quantiles = ("p50", "p95", "p99")
    cold = charts.bar_chart(
        list(quantiles),
        [
            ("cold", [_ms(cache["cold"][q]) if cache else None for q in quantiles]),
            ("cached", [_ms(cache["cached"][q]) if cache else None for q in quantiles]),
        ],
        title="TTFT, ms",
        y_label="ms",
        width=560,
        height=240,
    )
    return {
        "results": results,
        "accuracy": results.get("scenario") == "accuracy",
        "perplexity": results.get("perplexity"),
        "humaneval": results.get("humaneval"),
        "prefill": prefill,
        "decode": decode,
        "cache": cache,
        "speed_chart": speed,
        "ttft_chart": ttft,
        "cache_chart": cold,
        "errors": results.get("errors") or [],
        "spec_method": method,
        "spec": results.get("speculative"),
        # the decode table's columns of drafts: not for a run that asked for none
        "spec_columns": method not in (None, "off") and any(r.get("speculative") for r in decode),
    }


def progress_html(run: BenchmarkRun) -> str:
    return render_to_string("admin_panel/partials/benchmark_progress.html", {"run": run})


def results_html(run: BenchmarkRun) -> str:
    return render_to_string(
        "admin_panel/partials/benchmark_results.html", dict(results_context(run.results), run=run)
    )


def runs_html(oob: bool = False) -> str:
    return render_to_string(
        "admin_panel/partials/benchmark_runs.html",
        {"runs": BenchmarkRun.objects.all()[:RUNS_LISTED], "oob": oob},
    )


def _live_html(run: BenchmarkRun, request=None, oob: bool = False) -> str:
    return render_to_string(
        "admin_panel/partials/benchmark_live.html",
        dict(results_context(run.results), run=run, oob=oob, live=run.status in BenchmarkRun.ACTIVE),
        request=request,
    )


def _models() -> List[str]:
    return sorted(get_pool().ids())


def _form_context(values: Optional[dict] = None, error: Optional[str] = None, started=None) -> dict:
    values = values or {}
    return {
        "models": _models(),
        "presets": [(name, PRESETS[name], ACCURACY_PRESETS[name]) for name in ("small", "default")],
        "values": values,
        "speculative_choices": SPECULATIVE_CHOICES,
        "error": error,
        "started": started,
    }


@admin_required
@require_http_methods(["GET", "POST"])
def page(request):
    if request.method == "POST":
        return _start(request)
    fail_lost_runs()
    active = BenchmarkRun.objects.filter(status__in=BenchmarkRun.ACTIVE).first()
    context = _form_context({"preset": "small", "scenario": "speed", "speculative": "off"})
    context.update(runs=BenchmarkRun.objects.all()[:RUNS_LISTED], active=active)
    if active is not None:
        context["live_html"] = _live_html(active, request)
    return render(request, "admin_panel/benchmark.html", context)


def _accuracy_from_form(data, preset: str) -> tuple:
    """(preset name, AccuracySettings): the preset's, with the form's number of problems."""
    text = (data.get("limit") or "").strip()
    if not text:
        return preset, ACCURACY_PRESETS[preset]
    try:
        limit = int(text)
    except ValueError:
        raise ValueError(f"HumanEval problems: {text!r} is not a whole number") from None
    try:
        return f"{preset}+custom", replace(ACCURACY_PRESETS[preset], limit=limit)
    except ValueError as exc:
        raise ValueError(f"HumanEval problems: {exc}".replace("limit=", "")) from None


def _settings_from_form(data) -> tuple:
    """(preset name, BenchSettings or AccuracySettings) from the form; ValueError with a message
    for the page."""
    preset = data.get("preset") or "small"
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}: choose {', '.join(PRESETS)}")
    scenario = data.get("scenario") or "speed"
    if scenario == "accuracy":
        return _accuracy_from_form(data, preset)
    if scenario != "speed":
        raise ValueError(f"Unknown scenario {scenario!r}: choose speed or accuracy")
    changes = {}
    if (data.get("concurrency") or "").strip():
        changes["concurrency"] = parse_concurrency(data["concurrency"])
    for name in _NUMBER_FIELDS:
        text = (data.get(name) or "").strip()
        if text:
            try:
                changes[name] = int(text)
            except ValueError:
                raise ValueError(f"{name.replace('_', ' ')}: {text!r} is not a whole number") from None
    name = preset if not changes else f"{preset}+custom"  # the method is recorded on its own
    changes["speculative"] = _speculative_from_form(data)
    try:
        return name, replace(PRESETS[preset], **changes)
    except ValueError as exc:
        raise ValueError(str(exc).replace("_", " ")) from None


def _speculative_from_form(data) -> Optional[str]:
    """The method a speed run asks for: off unless the form says otherwise; None: the model's."""
    text = (data.get("speculative") or "off").strip()
    if text == MODEL_SETTING:
        return None
    if text not in METHODS:
        choices = ", ".join(label for _, label in SPECULATIVE_CHOICES)
        raise ValueError(f"Speculative decoding: {text!r} is not one of {choices}")
    return text


def _start(request):
    fields = ("model", "preset", "scenario", "limit", "concurrency", "speculative") + _NUMBER_FIELDS
    values = {k: request.POST.get(k, "") for k in fields}
    model = values["model"].strip()

    def refuse(message: str):
        html = render_to_string(
            "admin_panel/partials/benchmark_form.html", _form_context(values, message), request=request
        )
        return shows_errors(HttpResponse(html, status=400))

    if not model:
        return refuse("Choose a model.")
    try:
        preset, bench_settings = _settings_from_form(request.POST)
        run = start_benchmark(model, bench_settings, preset)
    except BenchmarkRefused as exc:
        return refuse(str(exc))
    except ValueError as exc:
        return refuse(str(exc))
    html = render_to_string(
        "admin_panel/partials/benchmark_form.html", _form_context(values, started=run), request=request
    )
    return HttpResponse(html + _live_html(run, request, oob=True) + runs_html(oob=True))


@admin_required
@require_GET
def run_detail(request, run_id: int):
    """A run's progress and results into #bench-live (live over the socket while it runs)."""
    run = BenchmarkRun.objects.filter(pk=run_id).first()
    if run is None:
        return shows_errors(
            HttpResponse(
                f'<div id="bench-live"><p class="error">Benchmark #{run_id} does '
                "not exist (deleted?).</p></div>",
                status=404,
            )
        )
    return HttpResponse(_live_html(run, request))


@admin_required
@require_POST
def run_delete(request, run_id: int):
    fail_lost_runs()
    run = BenchmarkRun.objects.filter(pk=run_id).first()
    message = None
    if run is None:
        message = f"Benchmark #{run_id} does not exist."
    elif run.status == BenchmarkRun.RUNNING:
        message = f"Benchmark #{run_id} is running; delete it once it has finished."
    else:
        run.delete()
    html = render_to_string(
        "admin_panel/partials/benchmark_runs.html",
        {"runs": BenchmarkRun.objects.all()[:RUNS_LISTED], "message": message},
    )
    status = 409 if message and run is not None else (404 if message else 200)
    return shows_errors(HttpResponse(html, status=status))


@admin_required
@require_GET
def compare(request):
    """Selected runs side by side: one column per run, tokens/s overlays, cold vs cached bars."""
    try:
        ids = [int(i) for i in request.GET.getlist("runs")]
    except ValueError:
        ids = []
    runs = list(BenchmarkRun.objects.filter(pk__in=ids, results__isnull=False).order_by("created"))
    if len(runs) < 2:
        return shows_errors(
            HttpResponse(
                '<div id="bench-compare" class="card"><p class="error">Select two or '
                "more runs that have results to compare them.</p></div>",
                status=400,
            )
        )
    return HttpResponse(
        render_to_string("admin_panel/partials/benchmark_compare.html", compare_context(runs))
    )


def compare_context(runs: List[BenchmarkRun]) -> dict:
    levels = sorted(
        {
            r["concurrency"]
            for run in runs
            for r in (run.results.get("prefill") or []) + (run.results.get("decode") or [])
        }
    )

    def value(run, scenario, c, pick):
        for row in run.results.get(scenario) or []:
            if row["concurrency"] == c:
                return pick(row)
        return None

    rows = []
    for c in levels:
        rows.append(
            (
                f"prefill tokens/s aggregate, c={c}",
                [value(r, "prefill", c, lambda x: x["tokens_per_s"]["aggregate"]) for r in runs],
                "rate",
            )
        )
        rows.append(
            (
                f"prefill TTFT p50 (ms), c={c}",
                [value(r, "prefill", c, lambda x: _ms(x["ttft_s"]["p50"])) for r in runs],
                "ms",
            )
        )
    for c in levels:
        rows.append(
            (
                f"decode tokens/s aggregate, c={c}",
                [value(r, "decode", c, lambda x: x["tokens_per_s"]["aggregate"]) for r in runs],
                "rate",
            )
        )
        rows.append(
            (
                f"decode tokens/s per stream, c={c}",
                [value(r, "decode", c, lambda x: x["tokens_per_s"]["per_stream"]) for r in runs],
                "rate",
            )
        )
    caches = [r.results.get("cache") or {} for r in runs]
    rows.append(("TTFT cold p50 (ms)", [_ms((c.get("cold") or {}).get("p50")) for c in caches], "ms"))
    rows.append(("TTFT cached p50 (ms)", [_ms((c.get("cached") or {}).get("p50")) for c in caches], "ms"))
    rows.append(("cold / cached", [c.get("speedup") for c in caches], "ratio"))
    rows += _speculative_rows(runs)
    if any(r.results.get("scenario") == "accuracy" for r in runs):
        perplexity = [(r.results.get("perplexity") or {}).get("perplexity") for r in runs]
        rows.append(("perplexity", perplexity, "perplexity"))
        rows.append(
            ("HumanEval pass@1", [(r.results.get("humaneval") or {}).get("pass_at_1") for r in runs], "share")
        )
    x_labels = [(c, str(c)) for c in levels]
    names = [f"#{r.pk} {r.model}" for r in runs]

    def overlay(scenario, title):
        return charts.line_chart(
            [
                (
                    name,
                    [
                        (row["concurrency"], row["tokens_per_s"]["aggregate"])
                        for row in r.results.get(scenario) or []
                    ],
                )
                for name, r in zip(names, runs)
            ],
            title=title,
            y_label="tokens/s",
            x_labels=x_labels,
            width=560,
            height=240,
        )

    return {
        "runs": runs,
        "rows": rows,
        "prefill_chart": overlay("prefill", "prefill tokens/s"),
        "decode_chart": overlay("decode", "decode tokens/s"),
        "cache_chart": charts.bar_chart(
            names,
            [
                ("cold", [_ms((c.get("cold") or {}).get("p50")) for c in caches]),
                ("cached", [_ms((c.get("cached") or {}).get("p50")) for c in caches]),
            ],
            title="TTFT p50, ms",
            y_label="ms",
            width=560,
            height=240,
        ),
    }


def _speculative_rows(runs: List[BenchmarkRun]) -> list:
    """The compare table's rows of speculative decoding over each run (none when no run asked for
    it: runs from before it, accuracy runs); "-" where a run has no counters."""
    methods = [speculative_label(r.results.get("settings")) for r in runs]
    if not any(methods):
        return []
    specs = [r.results.get("speculative") or {} for r in runs]
    return [
        ("speculative decoding", [m or "-" for m in methods], "text"),
        ("drafted tokens", [s.get("drafted_tokens") for s in specs], "count"),
        ("accepted tokens", [s.get("accepted_tokens") for s in specs], "count"),
        ("acceptance", [s.get("acceptance") for s in specs], "share"),
        ("tokens per verify pass", [s.get("tokens_per_pass") for s in specs], "per_pass"),
    ]
