"""Template variables every console page has."""

from admin_panel.auth import key_required


def console(request):
    return {"key_required": key_required()}
