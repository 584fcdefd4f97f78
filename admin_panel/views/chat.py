"""/admin/chat/: talk to a model; the conversation runs over the page's websocket
(admin_panel/consumers/chat.py)."""

from __future__ import annotations

from django.shortcuts import render

from admin_panel.auth import admin_required
from inference.mcp.manager import get_manager
from inference.pool import get_pool


@admin_required
def chat(request):
    pool = get_pool()
    models = [{"id": model_id, "loaded": pool.loaded(model_id) is not None} for model_id in pool.ids()]
    selected = request.GET.get("model") or next((m["id"] for m in models if m["loaded"]), None)
    mcp = get_manager()
    servers = mcp.servers() if mcp is not None else []
    return render(
        request,
        "admin_panel/chat.html",
        {
            "models": models,
            "selected": selected,
            "mcp_servers": len(servers),
            "mcp_running": sum(1 for s in servers if s["state"] == "running"),
            "mcp_tools": len(mcp.tools()) if mcp is not None else 0,
        },
    )
