"""Who may use the console: anyone when omlx runs without keys (no `--api-key`, no created key),
else a browser session that logged in with the --api-key or a created key that has the admin
scope (admin_panel/views/auth.py; inference/keys/).

The session keeps what it logged in with, not a flag: a digest of the --api-key (a restart with
another `--api-key` ends every login made with the old one), or the created key's id (revoking the
key ends its logins, and the console's websockets close: admin_panel/consumers/__init__.py).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
from importlib import import_module
from typing import Optional
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.csrf import csrf_protect

from inference.keys import scopes
from inference.keys.ring import KeyInfo, get_ring

logger = logging.getLogger("omlx.admin")

SESSION_KEY = "omlx_admin_key"  # digest of the --api-key it logged in with
SESSION_KEY_ID = "omlx_key_id"  # or the id of the created key
AUTH_GROUP = "omlx-auth"  # the channel-layer group told of logouts and revoked keys


def key_required() -> bool:
    ring = get_ring()
    ring.refresh()
    return bool(settings.OMLX_API_KEY) or bool(ring)


def _digest(key: str) -> str:
    return hashlib.sha256(("omlx-admin:" + key).encode()).hexdigest()


def check_key(given: str):
    """What a login with ``given`` opens: True for the --api-key (or no keys at all), the KeyInfo
    of a created key with the admin scope, else None."""
    if not key_required():
        return True
    expected = settings.OMLX_API_KEY
    if expected and hmac.compare_digest(given.encode(), expected.encode()):
        return True
    info = get_ring().match(given)
    return info if info is not None and scopes.ADMIN in info.scopes else None


def log_in(session, key: Optional[KeyInfo] = None) -> None:
    session.cycle_key()  # a new session id at login (no fixation)
    if key is None:
        session[SESSION_KEY] = _digest(settings.OMLX_API_KEY or "")
    else:
        session[SESSION_KEY_ID] = key.id


def log_out(session) -> None:
    session.flush()
    notify_auth_changed()


def is_authenticated(session) -> bool:
    """Synchronous (the session may read the database): consumers call it through
    ``database_sync_to_async``."""
    if not key_required():
        return True
    if session is None:
        return False
    stored = session.get(SESSION_KEY)
    if stored and settings.OMLX_API_KEY:
        return hmac.compare_digest(stored, _digest(settings.OMLX_API_KEY))
    info = get_ring().get(session.get(SESSION_KEY_ID))
    return info is not None and scopes.ADMIN in info.scopes


def session_is_authenticated(session_key: Optional[str]) -> bool:
    """``is_authenticated`` of the session as it is stored now (a logout flushed it), not as a
    long-lived consumer read it when it connected."""
    if not key_required():
        return True
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    return is_authenticated(store)


def notify_auth_changed() -> None:
    """Tell this server's console websockets to check their login again now (a logout, a revoked
    key); a key revoked by another process is seen by their periodic check."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(AUTH_GROUP, {"type": "auth.changed"})
    except Exception:  # the periodic check still closes them
        logger.warning("could not tell the console's websockets of a logout", exc_info=True)


def admin_required(view):
    """Page and action views of the console: CSRF-checked; without a login, a redirect to the login
    page (htmx requests get a 401 whose HX-Redirect sends the whole page there)."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        if not is_authenticated(request.session):
            target = reverse("admin_panel:login") + "?" + urlencode({"next": request.get_full_path()})
            if request.headers.get("HX-Request"):
                response = HttpResponse("Log in again", status=401)
                response["HX-Redirect"] = target
                return response
            return HttpResponseRedirect(target)
        return view(request, *args, **kwargs)

    return csrf_protect(wrapped)
