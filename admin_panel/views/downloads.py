"""/admin/downloads/: download a model from the Hugging Face hub into the first model folder, with
the same code as `omlx pull` (admin_panel/downloads.py runs it); progress comes over the websocket
``ws/admin/downloads/`` (admin_panel/consumers/downloads.py).

Every action is an htmx POST to ``action/`` (start, cancel, resume, forget) that answers with the
list; a bad repo id or a second download of the same repo answers 400 with the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from admin_panel.auth import admin_required
from admin_panel.downloads import get_downloads
from admin_panel.views import shows_errors

Message = Tuple[str, str]  # ("ok" | "error", text)
ACTIONS = ("start", "cancel", "resume", "forget")


def target_dir() -> Path:
    """Where downloads go: the first model folder (the one `omlx pull` uses by default)."""
    return Path(settings.OMLX_MODEL_DIRS[0])


def list_context(messages: List[Message]) -> dict:
    downloads = get_downloads()
    return {
        "downloads": downloads.items(),
        "interrupted": downloads.interrupted(target_dir()),
        "messages": messages,
        "model_dir": target_dir(),
    }


@admin_required
@require_GET
def page(request):
    return render(request, "admin_panel/downloads.html", list_context([]))


@admin_required
@require_POST
def action(request):
    messages: List[Message] = []
    status = 200
    try:
        _act(request.POST, messages)
    except ValueError as exc:
        messages.append(("error", str(exc)))
        status = 400
    except KeyError:
        messages.append(("error", "That download is not in the list (the server restarted?)"))
        status = 404
    template = (
        "admin_panel/partials/downloads_list.html"
        if request.headers.get("HX-Request")
        else "admin_panel/downloads.html"
    )
    return shows_errors(render(request, template, list_context(messages), status=status))


def _act(form, messages: List[Message]) -> None:
    act = form.get("action", "")
    if act not in ACTIONS:
        raise ValueError(f"unknown action {act!r} (one of {', '.join(ACTIONS)})")
    downloads = get_downloads()
    if act in ("start", "resume"):
        repo = form.get("repo", "").strip()
        if not repo:
            raise ValueError("type the model's id on the hub, ORG/NAME")
        if (target_dir() / repo).exists() and "/" in repo:
            raise ValueError(f"{repo} is in {target_dir() / repo} already (remove it to download it again)")
        download = downloads.start(repo, form.get("revision", ""), target_dir())
        messages.append(
            (
                "ok",
                f"{'Resuming' if act == 'resume' else 'Downloading'} {download.repo} "
                f"({download.revision}) into {target_dir()}",
            )
        )
        return
    try:
        download_id = int(form.get("id", ""))
    except ValueError:
        raise ValueError(f"{form.get('id')!r} is not a download id") from None
    if act == "cancel":
        download = downloads.cancel(download_id)
        messages.append(("ok", f"Cancelling {download.repo}…"))
    else:
        downloads.forget(download_id)
