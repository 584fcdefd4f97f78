"""Template variables every console page has: whether a login is needed (``key_required``) and,
when it is not, whether the server listens on a network address (the notice that auth is off)."""

from django.conf import settings

from admin_panel.auth import key_required
from omlx_site.boundary import is_loopback


def console(request):
    required = key_required()
    network = not required and not is_loopback(settings.OMLX_HOST)
    return {"key_required": required, "auth_off_network": network, "listen_host": settings.OMLX_HOST}
