"""/admin/cache/: the KV block cache per model (hot tier in RAM, cold tier on SSD), GC runs,
clearing, and the cold-directory probe with its suggestions.

htmx actions: ``action/`` (POST ``action`` = "clear" with a ``fingerprint`` or "all", or "gc")
answers with the re-rendered panels; ``probe/`` (POST starts a probe on a thread, GET polls it)
answers with the probe panel, which polls every second while the probe runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from admin_panel import cache_report
from admin_panel.auth import admin_required
from admin_panel.views import shows_errors
from admin_panel.probe_job import probe_job
from admin_panel.templatetags.omlx_units import human_bytes
from cache import tasks as cache_tasks
from cache.block_file import FINGERPRINT_DIR
from cache.clear import Cleared, clear_model
from inference.pool import get_pool

Message = Tuple[str, str]
GC_ROWS = 20


@admin_required
@require_GET
def page(request):
    return render(request, "admin_panel/cache.html", _context([]))


@admin_required
@require_GET
def panel(request):
    return render(request, "admin_panel/partials/cache_panels.html", _context([]))


@admin_required
@require_POST
def action(request):
    messages: List[Message] = []
    act = request.POST.get("action", "")
    status = 200
    if act == "gc":
        status = _run_gc(messages)
    elif act == "clear":
        status = _clear(request.POST.get("fingerprint", ""), messages)
    else:
        messages.append(("error", f"unknown action {act!r} (clear or gc)"))
        status = 400
    template = (
        "admin_panel/partials/cache_panels.html"
        if request.headers.get("HX-Request")
        else "admin_panel/cache.html"
    )
    response = render(request, template, _context(messages), status=status)
    return shows_errors(response)


@admin_required
@require_http_methods(["GET", "POST"])
def probe(request):
    status = 200
    message = None
    if request.method == "POST":
        root = settings.OMLX_COLD_CACHE_DIR
        if root is None:
            message, status = (
                "The SSD tier is off (--paged-ssd-cache-dir off): there is no directory to probe",
                409,
            )
        else:
            pool = get_pool()
            facts = cache_report.model_facts(pool)
            block_bytes = cache_report.probe_block_bytes(facts, cache_report.rows(pool, _root()))
            if not probe_job.start(root, block_bytes, facts):
                message, status = "A probe is running already", 409
    response = render(
        request,
        "admin_panel/partials/cache_probe.html",
        {"probe": probe_job.state(), "message": message},
        status=status,
    )
    return shows_errors(response)


def _run_gc(messages: List[Message]) -> int:
    try:
        result = cache_tasks.run("manual")
    except Exception as exc:  # noqa: BLE001 - an unreadable directory, a locked database
        messages.append(("error", f"GC failed: {exc}"))
        return 500
    if result is None:
        messages.append(("error", "The SSD tier is off (--paged-ssd-cache-dir off): nothing to collect"))
        return 409
    messages.append(
        (
            "ok",
            f"GC removed {result.expired} expired and {result.evicted} least recently used "
            f"blocks ({human_bytes(result.removed_bytes)}); {result.files} blocks left",
        )
    )
    return 200


def _clear(target: str, messages: List[Message]) -> int:
    pool = get_pool()
    root = _root()
    rows = cache_report.rows(pool, root)
    if target == "all":
        chosen = [r for r in rows if r.fingerprint]
    elif FINGERPRINT_DIR.match(target):
        chosen = [r for r in rows if r.fingerprint == target]
        if not chosen:
            messages.append(("error", f"No cached blocks of fingerprint {target}"))
            return 404
    else:
        messages.append(("error", f"{target!r} is not a model fingerprint (or 'all')"))
        return 400
    engines: dict = {}  # fingerprint -> the loaded engines with it (copies of a model share it)
    for engine in cache_report.loaded_caches(pool).values():
        fingerprint = engine.stats().fingerprint  # None: caching off
        if fingerprint is not None:
            engines.setdefault(fingerprint, []).append(engine)
    total = Cleared()
    for fingerprint in dict.fromkeys(r.fingerprint for r in chosen):
        try:
            for engine in engines.get(fingerprint, [])[1:]:  # their hot tiers; the last one does the disk
                total.add(clear_model(None, fingerprint, _on(engine)))
            first = engines.get(fingerprint, [None])[0]
            total.add(clear_model(root, fingerprint, _on(first) if first is not None else None))
        except Exception as exc:  # noqa: BLE001 - a closed engine, a locked database
            messages.append(("error", f"Clearing {fingerprint} failed: {exc}"))
            return 500
    who = "every model" if target == "all" else ", ".join(r.name for r in chosen)
    messages.append(
        (
            "ok",
            f"Cleared {who}: {total.hot_blocks} hot blocks ({human_bytes(total.hot_bytes)}) and "
            f"{total.cold_files} SSD blocks ({human_bytes(total.cold_bytes)})",
        )
    )
    return 200


def _on(engine):
    """Run ``fn(block_cache)`` on the engine's thread (the hot tier is the engine's)."""
    return lambda fn: engine.call(lambda e: fn(e.prefix_cache), timeout=60)


def _root():
    root = settings.OMLX_COLD_CACHE_DIR
    return Path(root) if root is not None else None


def _context(messages: List[Message]) -> dict:
    pool = get_pool()
    cache_rows = cache_report.rows(pool, _root())
    return {
        "rows": cache_rows,
        "totals": cache_report.totals(cache_rows, settings),
        "gc_runs": cache_tasks.recent(GC_ROWS),
        "messages": messages,
        "probe": probe_job.state(),
    }
