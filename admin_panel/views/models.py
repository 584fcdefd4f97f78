"""/admin/models/: every discovered model, the memory it takes against the limits, and actions.

Every action is an htmx POST to ``action/`` (the model id and the action in the form) that
answers with the re-rendered table; bad values answer 400 with the table and an error message,
as the REST API would (the same checks: ``ModelPool.update_settings``). Loads, unloads and imports
of GGUF models (other apps', or a ``.gguf`` file in a model directory: ``inference.pool.app_import``)
run on threads (admin_panel/model_jobs.py); while one runs the table polls ``table/`` every 2 s.
"""

from __future__ import annotations

import json
from typing import List, Optional, Tuple

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from admin_panel.auth import admin_required
from admin_panel.views import shows_errors
from admin_panel.model_jobs import jobs
from inference.chat.capabilities import TOOL_PARSER_CHOICES, folder_tool_format
from inference.engine.config import EngineConfig
from inference.pool import InsufficientMemory, ModelBusy, ModelUnavailable, get_pool
from inference.pool.app_import import import_model
from inference.pool.discovery import KINDS
from inference.pool.model_settings import ENGINE_FIELDS, LOAD_FIELDS, SAMPLING_FIELDS

Message = Tuple[str, str]  # ("ok" | "error", text)

# The per-model KV format (kv_bits), with what it was measured to cost and save
# (docs/benchmarks.md, "Quantized KV"; the label's title repeats the figures).
KV_CHOICES = [
    (0, "float (the model's dtype)"),
    (8, "8-bit: 1.9x tokens/GB, perplexity +0.24%"),
    (4, "4-bit: 3.6x tokens/GB, perplexity +10.9%"),
]
INT_FIELDS = {"top_k", "max_tokens", "context_length", "num_draft_tokens", *LOAD_FIELDS}
MS_FIELDS = ("max_batch_wait_ms", "max_step_ms")  # the ENGINE_FIELDS in milliseconds
ACTIONS = ("load", "unload", "import", "pin", "ttl", "alias", "settings", "rescan")


@admin_required
@require_GET
def page(request):
    return render(request, "admin_panel/models.html", _context([]))


@admin_required
@require_GET
def table(request):
    """The table; for the page's poll (``since`` = the states it shows), 204 while no load,
    unload or error changed them, so htmx keeps the table (and what is typed in it) as it is."""
    since = request.GET.get("since")
    if since is not None and since == _states(get_pool().status()["data"]):
        return HttpResponse(status=204)
    return render(request, "admin_panel/partials/models_table.html", _context([]))


@admin_required
@require_POST
def action(request):
    messages: List[Message] = []
    status = 200
    try:
        status = _act(request.POST, messages)
    except ValueError as exc:
        messages.append(("error", str(exc)))
        status = 400
    template = (
        "admin_panel/partials/models_table.html"
        if request.headers.get("HX-Request")
        else "admin_panel/models.html"
    )
    response = render(request, template, _context(messages), status=status)
    return shows_errors(response)


def _act(form, messages: List[Message]) -> int:
    act = form.get("action", "")
    if act not in ACTIONS:
        raise ValueError(f"unknown action {act!r} (one of {', '.join(ACTIONS)})")
    pool = get_pool()
    if act == "rescan":
        found = pool.rescan()
        messages.append(("ok", f"Rescanned the model directories: {len(found)} folders"))
        return 200
    name = form.get("model", "")
    model_id = _known(pool, name)
    if model_id is None:
        messages.append(("error", f"The model '{name}' does not exist"))
        return 404
    if act in ("load", "unload", "import"):
        return _start(pool, model_id, act, messages)
    if act == "pin":
        pinned = form.get("pinned") == "true"
        pool.update_settings(model_id, {"pinned": pinned})
        messages.append(
            ("ok", f"{model_id} is {'pinned: never unloaded, loaded at start' if pinned else 'unpinned'}")
        )
    elif act == "ttl":
        ttl = _number(form.get("ttl_seconds", ""), "ttl_seconds", integer=False)
        pool.update_settings(model_id, {"ttl_seconds": ttl})
        messages.append(("ok", f"{model_id}: TTL {'off' if ttl is None else f'{ttl:g} s'}"))
    elif act == "alias":
        alias = form.get("alias", "").strip() or None
        pool.update_settings(model_id, {"alias": alias})
        messages.append(("ok", f"{model_id}: alias {alias or 'removed'}"))
    else:
        pool.update_settings(model_id, _settings_from_form(form))
        messages.append(("ok", f"{model_id}: settings saved (they apply to the next request)"))
    return 200


def _start(pool, model_id: str, act: str, messages: List[Message]) -> int:
    if act == "unload" and pool.loaded(model_id) is None:
        messages.append(("error", f"{model_id} is not loaded"))
        return 409
    if act == "load" and pool.loaded(model_id) is not None:
        messages.append(("ok", f"{model_id} is loaded"))
        return 200
    if act == "import" and pool.folders()[model_id].gguf is None:
        messages.append(("error", f"{model_id} is not a GGUF model: nothing to import"))
        return 400
    work = {
        "load": lambda: pool.engine(model_id),
        "unload": lambda: pool.unload(model_id),
        "import": lambda: (import_model(pool.folders()[model_id], pool.model_dir), pool.rescan()),
    }[act]
    job = jobs.start(model_id, act, work, _job_error)
    if job is None:
        messages.append(("error", f"{model_id}: a {jobs.running(model_id) or 'load'} is running already"))
        return 409
    if job.thread.is_alive():
        messages.append(("ok", f"{act.capitalize().removesuffix('e')}ing {model_id}…"))
        return 202
    failed = jobs.take_error(model_id)
    if failed is not None:
        messages.append(("error", failed.error))
        return failed.status
    messages.append(("ok", f"{model_id} {act}ed"))
    return 200


def _job_error(exc: BaseException) -> Optional[tuple]:
    from inference.engine import ModelLoadError  # inference.engine imports MLX; the console loads without it

    if isinstance(exc, ModelUnavailable):
        return 400, str(exc)
    if isinstance(exc, InsufficientMemory):
        return 507, str(exc)
    if isinstance(exc, ModelBusy):
        return 409, str(exc)
    if isinstance(exc, ModelLoadError):
        return 500, f"The model cannot be loaded: {exc}"
    if isinstance(exc, ValueError):  # an import refused: no GGUF, destination exists, bad blob
        return 400, str(exc)
    if isinstance(exc, KeyError):
        return 404, f"The model {exc} does not exist"
    if isinstance(exc, RuntimeError):
        return 503, str(exc)
    return None


def _states(data) -> str:
    """What the poll watches: each model's state and whether a job of it failed."""
    return ";".join(
        f"{r['id']}:{int(r['loaded'])}{int(r['loading'])}{jobs.running(r['id']) or '-'}"
        f"{int(jobs.has_error(r['id']))}"
        for r in sorted(data, key=lambda r: r["id"])
    )


def _known(pool, name: str) -> Optional[str]:
    if name in pool.folders():
        return name
    return pool.resolve(name)


def _number(text: str, name: str, integer: bool):
    """A form field as a number; empty means None (the default). ValueError names the field."""
    text = text.strip()
    if not text:
        return None
    try:
        return int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name}: {text!r} is not {kind} (leave it empty for the default)") from None


def _settings_from_form(form) -> dict:
    changes = {}
    for name in (*SAMPLING_FIELDS, *ENGINE_FIELDS, *LOAD_FIELDS, "context_length"):
        if name in form and name != "speculative":
            changes[name] = _number(form.get(name, ""), name, integer=name in INT_FIELDS)
    if "model_type" in form:
        changes["model_type"] = form.get("model_type") or None
    if "tool_parser" in form:
        changes["tool_parser"] = form.get("tool_parser") or None
    if "speculative" in form:
        changes["speculative"] = form.get("speculative") or None
    if "draft_model" in form:
        changes["draft_model"] = form.get("draft_model", "").strip() or None
    if "chat_template_kwargs" in form:
        text = form.get("chat_template_kwargs", "").strip()
        try:
            changes["chat_template_kwargs"] = json.loads(text) if text else {}
        except ValueError as exc:
            raise ValueError(f"chat_template_kwargs: not valid JSON ({exc})") from None
    return changes


def _context(messages: List[Message]) -> dict:
    pool = get_pool()
    status = pool.status()
    folders = pool.folders()
    rows = []
    for row in sorted(status["data"], key=lambda r: r["id"]):
        model_id = row["id"]
        failed = jobs.take_error(model_id)
        if failed is not None:
            messages.append(("error", failed.error))
        values = pool.settings(model_id)
        estimate = row["memory_estimate"] or {}
        folder = folders.get(model_id)
        if folder is not None and folder.base in folders:  # a LoRA adapter: its base's tokenizer
            folder = folders[folder.base]
        detected = (
            folder_tool_format(folder.path, folder.config.get("model_type")) if folder is not None else None
        )
        rows.append(
            dict(
                row,
                job=jobs.running(model_id),
                estimate_total=estimate.get("total_bytes"),
                tool_parser_detected=detected or "none",
                tool_parser=values.get("tool_parser") or detected or "none",
                settings=values,
                kwargs_json=json.dumps(values.get("chat_template_kwargs") or {}),
                sampling=[(name, values.get(name)) for name in SAMPLING_FIELDS],
                scheduling=[(name, values.get(name)) for name in MS_FIELDS],
            )
        )
    polling = jobs.any_running() or any(r["loading"] for r in rows)
    return {
        "rows": rows,
        "memory": status["memory"],
        "messages": messages,
        "polling": polling,
        "states": _states(status["data"]),
        "tool_parsers": TOOL_PARSER_CHOICES,
        "kinds": KINDS,
        "kv_choices": KV_CHOICES,
        "speculative_methods": EngineConfig.SPECULATIVE,
        "loaded_count": sum(1 for r in rows if r["loaded"]),
    }
