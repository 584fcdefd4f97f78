"""/admin/integrations/: how to point each coding agent (Claude Code, Codex CLI, opencode, aider)
at this server. The snippets are omlx_site/integrations.py's, the same as `omlx launch --print
CLIENT`, for the model chosen in the form (default: the one `omlx launch` would pick) and this
server's address as the browser reaches it. The API key is never put in the page: a placeholder
stands for it when the server has one.
"""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET

from admin_panel.auth import admin_required
from admin_panel.views import shows_errors
from inference.pool import get_pool
from omlx_site import integrations

KEY_PLACEHOLDER = "YOUR_OMLX_API_KEY"


@admin_required
@require_GET
def page(request):
    rows = get_pool().status()["data"]
    wanted = (request.GET.get("model") or "").strip() or None
    context = {
        "models": [r["id"] for r in rows if r.get("servable") and r.get("type") == "llm"],
        "clients": [],
        "error": None,
        "selected": None,
        "asks_key": bool(settings.OMLX_API_KEY),
        "placeholder": KEY_PLACEHOLDER,
    }
    status = 200
    try:
        model = integrations.pick_model(rows, wanted)
    except ValueError as exc:
        context["error"] = str(exc)
        status = 400 if wanted else 200
    else:
        row = next(r for r in rows if r["id"] == model)
        target = integrations.Target(
            request.build_absolute_uri("/").rstrip("/"),
            settings.OMLX_API_KEY,
            model,
            integrations.context_length(row),
        )
        context["selected"] = model
        context["clients"] = [
            {
                "id": client,
                "title": integrations.TITLES[client],
                "launch": f"omlx launch --model {model} {client}",
                "install": integrations.INSTALL_HINTS[client],
                "snippet": integrations.setup(client, target, key_text=KEY_PLACEHOLDER).snippet,
            }
            for client in integrations.CLIENTS
        ]
    if request.headers.get("HX-Request"):
        response = render(request, "admin_panel/partials/integrations_clients.html", context, status=status)
        return shows_errors(response) if status != 200 else response
    return render(request, "admin_panel/integrations.html", context, status=status)
