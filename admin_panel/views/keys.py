"""/admin/keys/: the API keys with scopes (inference/keys/), as `omlx keys` shows and changes them,
with each key's requests and tokens since the server started (/metrics' omlx_key_* series).

Every action is an htmx POST to ``action/`` (create, revoke) that answers with the list; a new
key's secret is shown in that answer only. Revoking a key ends the console logins made with it
and closes their websockets (admin_panel/auth.py: notify_auth_changed); revoking the key this
page was opened with sends the browser to the login page.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from admin_panel.auth import admin_required, is_authenticated, notify_auth_changed
from admin_panel.views import shows_errors
from inference import metrics
from inference.keys import scopes, store

Message = Tuple[str, str]  # ("ok" | "error", text)
ACTIONS = ("create", "revoke")


def list_context(messages: List[Message], secret: Optional[str] = None) -> dict:
    counts = metrics.key_counts()
    empty = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    rows = [
        {"row": row, "scopes": scopes.ordered(row.scopes), "counts": counts.get(row.key_id, empty)}
        for row in store.list_keys()
    ]
    return {
        "keys": rows,
        "admin_key": bool(settings.OMLX_API_KEY),
        "admin_counts": counts.get(metrics.ADMIN_LABELS[0], empty),
        "scope_choices": list(scopes.DESCRIPTIONS.items()),
        "messages": messages,
        "secret": secret,
    }


@admin_required
@require_GET
def page(request):
    return render(request, "admin_panel/keys.html", list_context([]))


@admin_required
@require_POST
def action(request):
    messages: List[Message] = []
    secret = None
    status = 200
    act = request.POST.get("action", "")
    try:
        if act == "create":
            row, secret = store.create(
                request.POST.get("name", ""),
                request.POST.getlist("scope"),
                request.POST.get("share_cache") == "on",
            )
            messages.append(
                ("ok", f"Created key {row.key_id} ({row.name}). Copy it now: it is not shown again.")
            )
        elif act == "revoke":
            row = store.revoke(request.POST.get("id", ""))
            notify_auth_changed()
            messages.append(("ok", f"Revoked key {row.key_id} ({row.name})."))
        else:
            raise ValueError(f"unknown action {act!r} (one of {', '.join(ACTIONS)})")
    except ValueError as exc:
        messages.append(("error", str(exc)))
        status = 400
    except LookupError as exc:
        messages.append(("error", str(exc)))
        status = 404
    if not is_authenticated(request.session):  # it revoked the key of this login
        response = HttpResponse("Log in again", status=401)
        response["HX-Redirect"] = reverse("admin_panel:login")
        return response
    template = (
        "admin_panel/partials/keys_list.html"
        if request.headers.get("HX-Request")
        else "admin_panel/keys.html"
    )
    response = shows_errors(render(request, template, list_context(messages, secret), status=status))
    response["Cache-Control"] = "no-store"  # it may carry a new key's secret
    return response
